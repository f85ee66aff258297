"""The systemd unit (deploy/systemd) and the Worker's side of Type=notify.

The unit is checked by systemd's own `systemd-analyze verify` (its warnings are
the failure: verify exits 0 on a misspelt directive and only prints it); the
notifications are read from a real datagram socket the test owns, given to a
real worker as $NOTIFY_SOCKET, the way systemd gives it."""
from __future__ import annotations

import configparser
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
from grpc_health.v1 import health_pb2

from blockx.adapters.grpc.server import LIVENESS_SERVICE
from blockx.app.config import WorkerFullConfig
from blockx.app.run import GRPC_STOP_GRACE_S
from blockx.worker.v1 import worker_pb2 as pb

pytestmark = pytest.mark.e2e

ROOT = pathlib.Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "systemd" / "blockx-worker.service"
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


def _verify(text: str, tmp_path) -> subprocess.CompletedProcess:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing (Debian package systemd)"
    unit = tmp_path / "blockx-worker.service"
    # The unit names the install path of its README; verify also checks that the
    # command exists, so point it at this checkout's own blockx.
    unit.write_text(text.replace("/opt/blockx/bin/blockx", str(pathlib.Path(sys.executable).with_name("blockx"))))
    return subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)


def test_the_unit_verifies_without_a_warning_and_a_broken_one_does_not(tmp_path):
    good = _verify(UNIT.read_text(), tmp_path)
    assert good.returncode == 0 and "blockx-worker.service" not in good.stderr, good.stderr
    bad = _verify(UNIT.read_text().replace("Type=notify", "Type=notifyy"), tmp_path)
    assert "Failed to parse service type" in bad.stderr, bad.stderr


def test_the_unit_gives_the_drain_time_to_finish():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read_string(UNIT.read_text())
    svc = unit["Service"]
    assert svc["Type"] == "notify" and svc["KillMode"] == "mixed" and svc["Delegate"] == "yes"
    stop_s = int(svc["TimeoutStopSec"])
    assert stop_s > WorkerFullConfig().drain_timeout_ms / 1000 + GRPC_STOP_GRACE_S, stop_s


def test_ready_then_stopping_on_notify_socket_and_liveness_holds_while_draining(start_worker, tmp_path):
    path = str(tmp_path / "notify")
    rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx.bind(path)
    rx.settimeout(30)
    try:
        w = start_worker({"NOTIFY_SOCKET": path})
        ready = rx.recv(4096).decode().split("\n")
        assert ready[0] == "READY=1" and f"MAINPID={w.proc.pid}" in ready, ready
        assert w.health() == SERVING and w.health(LIVENESS_SERVICE) == SERVING
        # A task that outlives the signal keeps the worker draining for a while.
        w.submit_calls("slow", [("sleepy", [3, "done"])])
        deadline = time.monotonic() + 20
        while w.result("slow").state != pb.TASK_STATE_RUNNING:
            assert time.monotonic() < deadline, "the slow task never ran"
            time.sleep(0.05)
        w.signal(signal.SIGTERM)
        stopping = rx.recv(4096).decode().split("\n")
        assert stopping[0] == "STOPPING=1", stopping
        assert w.health() == NOT_SERVING                       # readiness: out of rotation
        assert w.health(LIVENESS_SERVICE) == SERVING           # liveness: not restarted mid-drain
        assert w.wait_exit(60) == 0
        assert w.find_event("drain_finished", drained=True)
    finally:
        rx.close()
