"""A fleet for tests: real Worker processes registered in a real etcd.

`start_fleet(etcd, n, env)` starts n workers at once (in parallel, so a fleet of
three costs about one start) and waits until every one is in the registry as
ready. Each worker gets the test functions directory and a fast heartbeat."""
from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor

import aetcd

from tests.support.worker import WorkerProcess

PREFIX = "/blockx/workers/"


def worker_env(etcd, extra: dict | None = None) -> dict:
    return {"ETCD_ENDPOINTS": etcd.endpoint, "WORKER_HEARTBEAT_INTERVAL": "100ms", "EXECUTOR_COUNT": "1",
            "RESULT_RETENTION_MS": "60000", **(extra or {})}


def start_workers(etcd, n: int, functions_dir, extra: dict | None = None, executors: int = 1,
                  connection=None) -> list[WorkerProcess]:
    ws = [WorkerProcess(worker_env(etcd, extra), functions_dir=functions_dir, executors=executors) for _ in range(n)]
    try:
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(lambda w: w.start(), ws))
        for w in ws:
            wait_registered(etcd, f"127.0.0.1:{w.port}", connection=connection)
    except BaseException:
        for w in ws:          # leave no worker behind when the fleet does not come up
            try:
                w.stop()
            except Exception:  # noqa: BLE001 - best effort
                pass
        raise
    return ws


def registry(etcd, prefix: str = PREFIX, connection=None) -> dict[str, dict]:
    """``connection``: a blockx.etcd.connection.EtcdConnection (TLS, etcd user) for a secured etcd."""
    async def go():
        c = connection.client(0, timeout=2) if connection is not None else aetcd.Client(*etcd.host_port, timeout=2)
        try:
            r = await c.get_prefix(prefix.encode())
            return {kv.key.decode()[len(prefix):]: json.loads(kv.value) for kv in r}
        finally:
            await c.close()
    # In a thread of its own: callable from inside a running event loop too.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, go()).result()


def wait_registered(etcd, addr: str, timeout: float = 15.0, connection=None) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            hb = registry(etcd, connection=connection).get(addr)
        except Exception:  # noqa: BLE001 - etcd restarting
            hb = None
        if hb and hb.get("ready"):
            return hb
        if time.monotonic() > deadline:
            raise AssertionError(f"worker {addr} not registered as ready within {timeout}s")
        time.sleep(0.05)


async def until(pred, timeout: float, what: str, step: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(step)
