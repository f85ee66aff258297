"""The OCI image (Containerfile, `make image`) run for real with podman: a
container on host networking with a free loopback port becomes ready (grpc
health, and the image's own HEALTHCHECK), runs tasks through blockx.client, and
on SIGTERM drains and exits 0."""
from __future__ import annotations

import json
import shutil
import threading
import time
import uuid

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from blockx.client import connect
from tests.e2e.conftest import make_functions_dir
from tests.support import auth
from tests.support.etcd import free_port
from tests.support.podman import build_image, podman, readable_dir

pytestmark = pytest.mark.e2e

SERVING = health_pb2.HealthCheckResponse.SERVING


def health(addr: str, service: str = "") -> int | None:
    with grpc.insecure_channel(addr) as ch:
        try:
            return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service),
                                                         timeout=2).status
        except grpc.RpcError:
            return None


def wait_serving(addr: str, timeout: float = 60.0) -> float:
    t0 = time.monotonic()
    while health(addr) != SERVING:
        assert time.monotonic() - t0 < timeout, f"{addr} never SERVING"
        time.sleep(0.1)
    return time.monotonic() - t0


@pytest.fixture
def mounts():
    d = readable_dir("bx-image-")
    fdir = make_functions_dir(d)
    for p in [fdir, *fdir.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    tokens = auth.write_tokens(d, {"admin": auth.HARNESS_TOKEN})
    (d / "tokens").chmod(0o644)
    yield fdir, tokens
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.timeout(1800)   # a cold `make image` (debootstrap, then the build) takes minutes
def test_image_runs_tasks_and_drains_on_sigterm(mounts):
    image, build_s = build_image()
    info = json.loads(podman("image", "inspect", image).stdout)[0]
    cfg = info["Config"]
    assert cfg["User"] == "blockx" and "/var/lib/blockx/state" in cfg["Volumes"]
    assert "blockx health" in " ".join(info["Healthcheck"]["Test"])
    fdir, tokens = mounts
    port, mport = free_port(), free_port()
    addr = f"127.0.0.1:{port}"
    name = f"bx-image-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    podman("run", "-d", "--name", name, "--network", "host",
           "-e", f"WORKER_LISTEN=127.0.0.1:{port}", "-e", f"METRICS_LISTEN=127.0.0.1:{mport}",
           "-e", "ETCD_ENDPOINTS=none", "-e", "EXECUTOR_COUNT=2", "-e", "FUNCTIONS_DIR=/functions",
           "-e", "LOG_LEVEL=INFO", "-e", "DRAIN_TIMEOUT_MS=20000",
           "-v", f"{fdir}:/functions:ro", "-v", f"{tokens}:/etc/blockx/tokens.json:ro", image)
    try:
        ready_s = wait_serving(addr)
        print(f"\nimage build {build_s:.1f} s, size {info['Size'] / 1e6:.0f} MB, "
              f"container ready {time.monotonic() - t0:.2f} s after `podman run` ({ready_s:.2f} s polling)")
        # The image's own HEALTHCHECK (blockx health) passes inside the container.
        hc = podman("healthcheck", "run", name, check=False)
        assert hc.returncode == 0, hc.stdout + hc.stderr
        # The worker is not root in the container, and says the sandbox is off.
        top = podman("top", name, "user", "args").stdout
        assert "blockx serve" in top and "root" not in top, top

        with connect(addr) as c:
            outs = list(c.map("square", list(range(200)), concurrency=32))
            assert sorted(o.outputs[0] for o in outs) == sorted(i * i for i in range(200)), outs[:3]
            assert all(o.state == "SUCCEEDED" for o in outs)
        # A task still running when SIGTERM comes is drained, not lost.
        with connect(addr) as c:
            results = []
            th = threading.Thread(target=lambda: results.append(c.submit([("sleep_ms", [2000])])))
            th.start()
            time.sleep(0.7)
            podman("kill", "--signal", "TERM", name)
            th.join(30)
        assert results and results[0].state == "SUCCEEDED", results
        rc = podman("wait", name, timeout=60).stdout.strip()
        logs = podman("logs", name)
        text = logs.stdout + logs.stderr
        assert rc == "0", text[-3000:]
        assert "EXECUTOR_SPAWN_MODE=process" in text
        events = [json.loads(l) for l in text.splitlines() if l.startswith("{")]
        names = {e.get("event") or e.get("msg") for e in events}
        assert "drain_finished" in names, sorted(n for n in names if n)[:60]
        assert any((e.get("event") or e.get("msg")) == "drain_finished" and e.get("drained") is True for e in events)
    finally:
        podman("rm", "-f", "-v", "-t", "0", name, check=False)
