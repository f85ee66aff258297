"""deploy/kubernetes/ played for real with `podman kube play`: an etcd pod and
three worker pods from the image (the play variant made from the Deployment's pod
template by deploy/kubernetes/podman_play.py, on host networking and loopback
ports), 1,000 tasks through blockx.client.Cluster from the host, then the pods are
stopped while tasks run: every worker drains and exits 0, no task is lost.

Side by side, the same 1,000 tasks through three bare workers on this machine."""
from __future__ import annotations

import asyncio
from collections import Counter
import json
import pathlib
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from blockx.client import Cluster
from tests.support import auth
from tests.support.etcd import EtcdServer, free_port
from tests.support.fleet import start_workers
from tests.support.podman import ROOT, build_image, podman, readable_dir

pytestmark = pytest.mark.e2e

KUBE = ROOT / "deploy" / "kubernetes"
sys.path.insert(0, str(KUBE))
import podman_play  # noqa: E402

N = 1000


def build_etcd_image() -> str:
    podman("build", "--format", "docker", "--network", "host", "-t", podman_play.ETCD_IMAGE,
           "-f", str(ROOT / "deploy" / "image" / "etcd.Containerfile"), str(ROOT / "deploy" / "image"), timeout=900)
    return podman_play.ETCD_IMAGE


async def run_map(endpoint: str, n_workers: int) -> tuple[float, list]:
    async with Cluster(endpoint) as cluster:
        deadline = time.monotonic() + 60
        while len([w for w in cluster.workers.values() if w.ready]) < n_workers:
            assert time.monotonic() < deadline, f"{n_workers} ready workers never in the view: {cluster.workers}"
            await asyncio.sleep(0.1)
        t0 = time.monotonic()
        outs = [o async for o in cluster.map("square", list(range(N)), concurrency=96)]
        return N / (time.monotonic() - t0), outs


def check(outs) -> None:
    ids = [o.task_id for o in outs]
    assert len(ids) == N and len(set(ids)) == N
    assert sorted(o.outputs[0] for o in outs if o.state == "SUCCEEDED") == sorted(i * i for i in range(N)), \
        [(o.state, o.failure_code, o.failure_message) for o in outs if o.state != "SUCCEEDED"][:5]


def test_play_variant_agrees_with_the_deployment():
    """The play pods are the Deployment's pod template but for what a shared host network needs."""
    template = podman_play.load("deployment.yaml")["spec"]["template"]
    pod = podman_play.worker_pod(template, 0, 18081, 18181, "127.0.0.1:12379", "/tmp/tokens")
    want, got = template["spec"], pod["spec"]
    for key in ("terminationGracePeriodSeconds", "securityContext"):
        assert got[key] == want[key]
    wc, gc = want["containers"][0], got["containers"][0]
    assert "ports" not in gc          # podman cannot map ports on host networking
    for key in ("name", "image", "resources"):
        assert gc[key] == wc[key]
    changed = {"WORKER_LISTEN", "WORKER_ADDR", "METRICS_LISTEN", "ETCD_ENDPOINTS", "POD_IP"}
    assert [e for e in gc["env"] if e["name"] not in changed] == [e for e in wc["env"] if e["name"] not in changed]
    assert gc["livenessProbe"]["exec"]["command"][-2:] == ["--service", wc["livenessProbe"]["grpc"]["service"]]
    assert "--service" not in gc["readinessProbe"]["exec"]["command"]
    for kind in ("readinessProbe", "livenessProbe"):
        assert {k: v for k, v in gc[kind].items() if k != "exec"} == {k: v for k, v in wc[kind].items() if k != "grpc"}
    assert [v["name"].removeprefix("blockx-worker-0-") for v in got["volumes"]] == [v["name"] for v in want["volumes"]]
    assert pod["metadata"]["labels"] == template["metadata"]["labels"]


@pytest.mark.timeout(2400)
def test_kube_play_fleet_runs_1000_tasks_and_drains_on_stop(tmp_path):
    image, _ = build_image()
    build_etcd_image()
    d = readable_dir("bx-kube-")
    tokens = auth.write_tokens(d, {"admin": auth.HARNESS_TOKEN})
    pathlib.Path(tokens).chmod(0o644)
    etcd_port = free_port()
    ports = [(free_port(), free_port()) for _ in range(3)]
    template = podman_play.load("deployment.yaml")["spec"]["template"]
    etcd = f"127.0.0.1:{etcd_port}"
    pods = [podman_play.etcd_pod(etcd_port)] + [
        podman_play.worker_pod(template, i, p, m, etcd, tokens, image) for i, (p, m) in enumerate(ports)]
    play = d / "play.yaml"
    play.write_text(yaml.safe_dump_all(pods, sort_keys=False))
    names = [p["metadata"]["name"] for p in pods]
    t0 = time.monotonic()
    try:
        podman("kube", "play", "--network", "host", "--configmap", str(KUBE / "configmap.yaml"), str(play),
               timeout=180)
        pushed = subprocess.run([str(pathlib.Path(sys.executable).with_name("blockx")), "functions", "push",
                                 "--etcd", etcd, str(ROOT / "blockx" / "examples" / "functions")],
                                capture_output=True, text=True, timeout=60)
        for _ in range(50):   # etcd's pod may still be starting
            if pushed.returncode == 0:
                break
            time.sleep(0.2)
            pushed = subprocess.run(pushed.args, capture_output=True, text=True, timeout=60)
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        pods_rate, outs = asyncio.run(run_map(etcd, 3))
        ready_s = time.monotonic() - t0
        check(outs)
        assert {o.worker for o in outs} == {f"127.0.0.1:{p}" for p, _ in ports}

        # Stop every worker pod while tasks run on each: the drain finishes them.
        async def slow_then_stop():
            async with Cluster(etcd) as cluster:
                while len([w for w in cluster.workers.values() if w.ready and not w.draining]) < 3:
                    await asyncio.sleep(0.05)
                tasks = [asyncio.ensure_future(cluster.submit([("sleep_ms", [2500])])) for _ in range(90)]
                await asyncio.sleep(1.0)
                loop = asyncio.get_running_loop()
                stop = loop.run_in_executor(None, stop_workers, names[1:])
                done = await asyncio.gather(*tasks)
                await stop
                return done
        slow = asyncio.run(slow_then_stop())
        assert all(o.state == "SUCCEEDED" for o in slow), [(o.state, o.failure_code) for o in slow]
        print(f"\nslow tasks per worker while stopping: {dict(Counter(o.worker for o in slow))}")
        for name in names[1:]:
            ctr = f"{name}-worker"
            state = json.loads(podman("inspect", ctr).stdout)[0]["State"]
            assert state["ExitCode"] == 0, (name, state, podman("logs", ctr, check=False).stderr[-2000:])
            logs = podman("logs", ctr).stderr + podman("logs", ctr).stdout
            assert '"drain_finished"' in logs and '"drained": true' in logs.replace('"drained":true', '"drained": true')
    finally:
        podman("kube", "down", str(play), check=False, timeout=180)
        shutil.rmtree(d, ignore_errors=True)

    # The same tasks through three bare workers (this checkout's, from tests/support) on this machine.
    server = EtcdServer()
    server.start()
    try:
        fdir = ROOT / "blockx" / "examples" / "functions"
        ws = start_workers(server, 3, fdir, {"EXECUTOR_COUNT": "4", "TASK_SLOTS": "50"})
        try:
            bare_rate, bare = asyncio.run(run_map(server.endpoint, 3))
            check(bare)
        finally:
            for w in ws:
                w.stop()
    finally:
        server.close()
    print(f"\nkube play: 3 pods ready + 1,000 tasks in {ready_s:.1f} s; Cluster over the 3 pods "
          f"{pods_rate:.0f} tasks/s, over 3 bare workers {bare_rate:.0f} tasks/s")


def stop_workers(names: list[str]) -> None:
    """podman 4.3's `kube down` removes pods at once (SIGKILL, no stop timeout: fixed in podman 5.1),
    so each pod is first stopped the way a kubelet stops it: SIGTERM, SIGKILL after the grace."""
    grace = str(podman_play.load("deployment.yaml")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])
    with ThreadPoolExecutor(len(names)) as pool:
        list(pool.map(lambda n: podman("pod", "stop", "-t", grace, n, timeout=120), names))
