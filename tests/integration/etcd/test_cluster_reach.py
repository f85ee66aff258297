"""blockx.client.Cluster over a real etcd whose registry names addresses where
no Worker answers: each is told at its first connection attempt ("nothing
listens" / "no answer"), marked down, and the task fails with that reason
within the cluster's wait, not after a connect timeout per attempt."""
from __future__ import annotations

import json
import socket
import time

import aetcd
import pytest

from blockx.client import Cluster, Unavailable

PREFIX = "/blockx/workers/"
BOUND_S = 8.0


def _heartbeat(addr: str) -> bytes:
    return json.dumps({"workerAddr": addr, "ready": True, "draining": False, "taskSlots": 4,
                       "freeSlots": 4, "updatedAtMs": int(time.time() * 1000)}).encode()


async def _register(etcd, *addrs: str) -> None:
    client = aetcd.Client(*etcd.host_port, timeout=5)
    try:
        for a in addrs:
            await client.put((PREFIX + a).encode(), _heartbeat(a))
    finally:
        await client.close()


def _refused_addr() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


async def test_a_registered_address_where_nothing_listens(etcd_server):
    addr = _refused_addr()
    await _register(etcd_server, addr)
    async with Cluster(etcd_server.endpoint, wait_for_worker_s=1.0) as cluster:
        t0 = time.monotonic()
        with pytest.raises(Unavailable) as ei:
            await cluster.submit(calls=[("add", [1, 2])])
        assert time.monotonic() - t0 < BOUND_S
    assert ei.value.message == f"nothing listens at {addr} (connection refused)"


async def test_a_registered_address_that_never_answers(etcd_server):
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        addr = "127.0.0.1:%d" % silent.getsockname()[1]
        await _register(etcd_server, addr)
        async with Cluster(etcd_server.endpoint, wait_for_worker_s=1.0) as cluster:
            t0 = time.monotonic()
            with pytest.raises(Unavailable) as ei:
                await cluster.submit(calls=[("add", [1, 2])])
            assert time.monotonic() - t0 < BOUND_S
    assert ei.value.message == f"no answer from {addr} within 1 s"
