"""(f) The fleet through etcd: blockx.client.Cluster over three workers.

- ``f_one_worker_throughput``: tasks/s of many one-call tasks (``map``, 64 in
  flight) through one WorkerClient on a worker, then through a Cluster while that
  worker is the only one registered: the cost of the cluster layer itself.
- ``f_cluster_throughput``: the same map through a Cluster over three workers in
  a real etcd. All three run on this one 2-core machine (with the client), so
  this shows spreading and its overhead, not scale-out.
- ``f_failover``: 200 tasks in flight through the Cluster (``sleep_ms``), then
  SIGKILL of the worker holding the most of them; the figure is the time from
  the kill until every task that was on it has been resubmitted and finished
  elsewhere (it includes one run of the task, ``task_ms``).
"""
from __future__ import annotations

import asyncio
import signal
import time

from bench.e2e.client import BenchFailure
from bench.e2e.harness import BenchWorker
from blockx.client import Cluster, WorkerClient


def _rate(n: int, seconds: float) -> float:
    return round(n / seconds, 1) if seconds > 0 else 0.0


async def _warm(client, n: int = 100) -> None:
    async for _ in client.map("add1", range(n), concurrency=32):
        pass


async def _map_seconds(client, n: int, inflight: int, timeout: float) -> float:
    await _warm(client)
    bad = 0
    t0 = time.perf_counter()

    async def run() -> None:
        nonlocal bad
        async for o in client.map("add1", range(n), concurrency=inflight):
            bad += not o.ok
    await asyncio.wait_for(run(), timeout)
    secs = time.perf_counter() - t0
    if bad:
        raise BenchFailure(f"{bad} of {n} tasks failed")
    return secs


async def one_worker_throughput(etcd_endpoint: str, worker: BenchWorker, n: int, inflight: int,
                                timeout: float) -> dict:
    """WorkerClient vs Cluster with one worker registered: the cluster layer's own cost."""
    # WorkerClient before and after the Cluster (the mean is the figure): a worker
    # gets slower as finished tasks pile up in its result table, and the order
    # must not decide the comparison.
    async with WorkerClient(worker.addr) as one:
        one_s = await _map_seconds(one, n, inflight, timeout)
    async with Cluster(etcd_endpoint) as cluster:
        await _wait_workers(cluster, 1)
        cl_s = await _map_seconds(cluster, n, inflight, timeout)
    async with WorkerClient(worker.addr) as one:
        one_s = (one_s + await _map_seconds(one, n, inflight, timeout)) / 2
    return {"tasks": n, "inflight": inflight, "worker_client_tasks_per_s": _rate(n, one_s),
            "cluster_one_worker_tasks_per_s": _rate(n, cl_s), "cluster_vs_worker_client": round(one_s / cl_s, 3)}


async def three_worker_throughput(etcd_endpoint: str, workers: list[BenchWorker], n: int, inflight: int,
                                  timeout: float) -> dict:
    async with Cluster(etcd_endpoint) as cluster:
        await _wait_workers(cluster, len(workers))
        secs = await _map_seconds(cluster, n, inflight, timeout)
        spread = [cluster.placed.get(w.addr, 0) for w in workers]
    return {"tasks": n, "inflight": inflight, "workers": len(workers),
            "cluster_tasks_per_s": _rate(n, secs), "placed_per_worker_incl_warmup": spread}


async def failover(etcd_endpoint: str, workers: list[BenchWorker], n: int, task_ms: int, timeout: float) -> dict:
    async with Cluster(etcd_endpoint) as cluster:
        await _wait_workers(cluster, len(workers))
        await _warm(cluster)
        runs = {}
        futs = [asyncio.ensure_future(cluster.submit(calls=[("sleep_ms", [task_ms])], task_id=f"fo-{i}"))
                for i in range(n)]
        deadline = time.monotonic() + 10
        while sum(cluster.placement.inflight.values()) < n:
            if time.monotonic() > deadline:
                raise BenchFailure("the failover tasks were never all in flight")
            await asyncio.sleep(0.005)
        victim_addr, on_victim = max(cluster.placement.inflight.items(), key=lambda kv: kv[1])
        victim = next(w for w in workers if w.addr == victim_addr)
        t0 = time.perf_counter()
        victim.proc.send_signal(signal.SIGKILL)
        for f in asyncio.as_completed(futs, timeout=timeout):
            o = await f
            if not o.ok:
                raise BenchFailure(f"{o.task_id}: {o.state} {o.failure_code} {o.failure_message}")
            runs[o.task_id] = (o.attempts, time.perf_counter() - t0)
        moved = [t for a, t in runs.values() if a > 1]
        if not moved:
            raise BenchFailure("no task was resubmitted after the SIGKILL")
        return {"tasks_in_flight": n, "task_ms": task_ms, "on_killed_worker": on_victim,
                "resubmitted": len(moved), "failover_s": round(max(moved), 3),
                "failover_minus_task_s": round(max(moved) - task_ms / 1000, 3)}


async def _wait_workers(cluster: Cluster, n: int) -> None:
    deadline = time.monotonic() + 15
    while len(cluster.view.placeable()) < n:
        if time.monotonic() > deadline:
            raise BenchFailure(f"only {len(cluster.view.placeable())} of {n} workers in the registry")
        await asyncio.sleep(0.02)


async def run_fleet(ns, sizes: dict, report: dict) -> None:
    from tests.support.etcd import EtcdServer

    etcd = EtcdServer()
    await asyncio.to_thread(etcd.start)
    env = {"ETCD_ENDPOINTS": etcd.endpoint, "WORKER_HEARTBEAT_INTERVAL": "100ms", "RESULT_RETENTION_MS": "2000"}
    workers = [BenchWorker(executors=ns.fleet_executors, env=env) for _ in range(3)]
    try:
        res = report["results"]
        await asyncio.to_thread(workers[0].start)
        res["f_one_worker_throughput"] = await one_worker_throughput(etcd.endpoint, workers[0], sizes["f_tasks"],
                                                                     64, timeout=300)
        await asyncio.gather(*(asyncio.to_thread(w.start) for w in workers[1:]))
        res["f_cluster_throughput"] = await three_worker_throughput(etcd.endpoint, workers, sizes["f_tasks"], 64,
                                                                    timeout=300)
        res["f_failover"] = await failover(etcd.endpoint, workers, 200, sizes["f_task_ms"], timeout=120)
    finally:
        for w in workers:
            try:
                await asyncio.to_thread(w.stop, 20)
            except Exception:  # noqa: BLE001 - the killed one is already gone
                pass
            w.cleanup()
        await asyncio.to_thread(etcd.close)
