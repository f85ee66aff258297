"""A first run, as a new user makes it, with real Workers and executors: `make
serve` serves the example functions while `blockx serve` keeps its production
defaults; etcd that is not there is said once; an orderly stop says nothing
alarming; each executor's attach is one log line; blockx_worker_ready follows
the readiness the Worker publishes (0 while it drains)."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest

from blockx.worker.v1 import worker_pb2 as pb
from tests.support.etcd import EtcdServer, free_port
from tests.support.worker import WorkerProcess, outputs

pytestmark = pytest.mark.e2e
ROOT = pathlib.Path(__file__).resolve().parents[2]
BLOCKX = pathlib.Path(sys.executable).with_name("blockx")


def _until(cond, what: str, timeout: float = 30.0, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


def _metric(w, name: str) -> float | None:
    for line in w.metrics_text().splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def _records(lines: list[str]) -> list[dict]:
    out = []
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def _serve_env(tmp: pathlib.Path) -> dict[str, str]:
    """A first run's environment: no profile, no functions directory chosen."""
    env = {k: v for k, v in os.environ.items() if k not in ("BLOCKX_PROFILE", "FUNCTIONS_DIR", "WORKER_CONFIG")}
    env.update({"WORKER_LISTEN": "127.0.0.1:0", "METRICS_LISTEN": "127.0.0.1:0", "ETCD_ENDPOINTS": "none",
                "EXECUTOR_COUNT": "1", "STATE_DIR": str(tmp / "state"),
                "EXECUTOR_SOCKET_PATH": str(tmp / "sock" / "worker.sock")})
    env.pop("BLOCKX_TOKEN", None)                  # the CLI finds the token this worker generated
    return env


def _print_config(cmd: list[str], env: dict[str, str]) -> dict:
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout[r.stdout.index("{"):])


def test_make_serve_serves_the_examples_and_blockx_serve_keeps_production_defaults(tmp_path):
    env = _serve_env(tmp_path)
    made = _print_config(["make", "-s", "serve", "ARGS=--print-config"], env)
    plain = _print_config([str(BLOCKX), "serve", "--print-config"], env)
    examples = str(ROOT / "blockx" / "examples" / "functions")
    assert os.path.realpath(made["functionsDir"]) == os.path.realpath(examples), made["functionsDir"]
    assert plain["functionsDir"] == "", plain["functionsDir"]
    blocked = _print_config(["make", "-s", "serve", "ARGS=--print-config --profile block"], env)
    assert blocked["functionsDir"] == ""


def test_the_readmes_first_command_runs_the_tours_first_task(tmp_path):
    env = _serve_env(tmp_path)
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(["make", "-s", "serve"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ready = _until(lambda: [r for r in _records(log.read_text().splitlines()) if r.get("event") == "worker_ready"]
                       or proc.poll() is not None, "worker_ready of `make serve`", timeout=600, every=0.2)
        assert proc.poll() is None, log.read_text()[-4000:]
        port = next(r["port"] for r in _records(log.read_text().splitlines()) if r.get("event") == "worker_serving")
        assert ready
        r = subprocess.run([str(BLOCKX), "submit", "--addr", f"127.0.0.1:{port}", "--compact", "--calls", "add:1,2",
                            "--calls", "add1:41", "--calls", "sum_squares:10"], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["state"] == "SUCCEEDED" and doc["result"]["outputs"] == [3, 42, 285]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)


def test_no_etcd_is_one_warning_and_info_when_it_comes_back():
    port = free_port()
    w = WorkerProcess({"ETCD_ENDPOINTS": f"127.0.0.1:{port}", "WORKER_HEARTBEAT_INTERVAL": "100ms"}, executors=1)
    w.start()
    try:
        w.wait_event("etcd_unavailable", 20)
        # Past the old 5 s rate limit: the registration has failed again and again by now
        # (backoff 0.2 s doubling to 5 s), and it said so once.
        _until(lambda: (_metric(w, "blockx_etcd_errors_total") or 0) >= 6, "six failed etcd attempts", 60, 0.2)
        unavailable = w.events_named("etcd_unavailable")
        assert len(unavailable) == 1 and unavailable[0]["level"] == "warning"
        assert not [e for e in w.events if e.get("level") == "warning" and "etcd" in json.dumps(e)
                    and e.get("event") != "etcd_unavailable"]
        with EtcdServer(client_port=port):
            back = w.wait_event("etcd_recovered", 30)
            assert back["level"] == "info" and back["failures"] >= 6
            w.wait_event("etcd_registered", 30)
        assert len(w.events_named("etcd_unavailable")) <= 2    # etcd stopped again at the end: a new outage
    finally:
        w.stop()


def _executor_lines(w: WorkerProcess, eid: str) -> list[str]:
    return [line for line in w.lines if eid in line and "attach" in line.lower()]


def test_an_orderly_stop_logs_no_warning_and_each_attach_is_one_line(functions_dir):
    w = WorkerProcess({"DRAIN_TIMEOUT_MS": "10000"}, executors=2, functions_dir=functions_dir)
    w.start()
    try:
        _until(lambda: all(_executor_lines(w, e) for e in ("exec-0", "exec-1")), "both executors attached")
        w.submit_calls("fr-1", [("add", [1, 2])])
        assert outputs(w.wait_terminal("fr-1")) == [3]
        started = len(w.lines)
        w.signal(signal.SIGTERM)
        assert w.wait_exit(60) == 0
        _until(lambda: w.find_event("worker_stopped"), "worker_stopped")
    finally:
        w.stop()
    for eid in ("exec-0", "exec-1"):
        lines = _executor_lines(w, eid)
        assert len(lines) == 1, "\n".join(lines)
        assert "\\\"" not in lines[0]                 # not a JSON record escaped inside another
    late = [r for r in _records(w.lines[started:]) if r.get("level") in ("warning", "error", "critical")]
    assert late == [], "\n".join(json.dumps(r) for r in late)


def test_blockx_worker_ready_is_0_while_draining(start_worker):
    w = start_worker({"DRAIN_TIMEOUT_MS": "20000"}, executors=1)
    _until(lambda: _metric(w, "blockx_worker_ready") == 1.0, "blockx_worker_ready 1")
    w.submit_calls("fr-drain", [("sleep_ms", [4000])])
    _until(lambda: w.result("fr-drain").state == pb.TASK_STATE_RUNNING, "the task to run")
    w.signal(signal.SIGTERM)
    _until(lambda: _metric(w, "blockx_worker_draining") == 1.0, "blockx_worker_draining 1")
    assert _metric(w, "blockx_worker_ready") == 0.0
    st = w.stub.GetWorkerStatus(pb.GetWorkerStatusRequest(), timeout=10)
    assert (st.ready, st.draining) == (False, True)          # the metric says what the status says
    assert w.wait_exit(60) == 0
