"""etcd registration of a real worker against a real etcd server."""
import asyncio
import json
import signal
import socket
import time

import aetcd
import pytest

from blockx.worker.v1 import worker_pb2 as pb
from tests.support.etcd import EtcdServer

pytestmark = pytest.mark.e2e
PREFIX = "/blockx/workers/"


@pytest.fixture
def etcd():
    server = EtcdServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


def _get(etcd, key):
    async def go():
        c = aetcd.Client(*etcd.host_port, timeout=2)
        try:
            r = await c.get(key.encode())
            if r is None:
                return None, 0
            return json.loads(r.value), r.lease
        finally:
            await c.close()
    return asyncio.run(go())


def _revoke(etcd, lease):
    async def go():
        c = aetcd.Client(*etcd.host_port, timeout=2)
        try:
            await c.revoke_lease(lease)
        finally:
            await c.close()
    asyncio.run(go())


def _eventually(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _value(etcd, key):
    try:
        return _get(etcd, key)
    except Exception:  # noqa: BLE001 - etcd restarting
        return None, 0


def test_registration_heartbeat_and_deregistration(start_worker, etcd):
    w = start_worker({"ETCD_ENDPOINTS": etcd.endpoint, "WORKER_HEARTBEAT_INTERVAL": "100ms",
                      "TASK_SLOTS": "4"})
    key = PREFIX + f"127.0.0.1:{w.port}"
    hb, lease = _eventually(lambda: _value(etcd, key)[0] and _value(etcd, key), 10, "registration")
    assert lease > 0
    assert hb["workerAddr"] == f"127.0.0.1:{w.port}" and hb["deployment"] == "block"
    assert hb["taskSlots"] == 4 and hb["executorsTotal"] == 2 and hb["executorsHealthy"] >= 1
    assert hb["ready"] is True and hb["draining"] is False
    # Registered only after the first healthy executor.
    names = [w._event_name(e) for e in w.events]
    assert "worker_ready" in names and "etcd_registered" in names
    assert names.index("worker_ready") < names.index("etcd_registered")

    # The heartbeat follows the slot table.
    w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="hb-1", ttl_ms=60000), timeout=5)
    hb = _eventually(lambda: (v := _value(etcd, key)[0]) and v["reservedSlots"] == 1 and v, 5, "reservedSlots=1")
    assert hb["freeSlots"] == 3
    w.submit_calls("hb-2", [("sleep_ms", [1500])])
    hb = _eventually(lambda: (v := _value(etcd, key)[0]) and v["runningTasks"] >= 1 and v, 5, "runningTasks")
    w.wait_terminal("hb-2")
    _eventually(lambda: (v := _value(etcd, key)[0]) and v["runningTasks"] == 0 and v, 5, "runningTasks=0")

    # A revoked lease: the worker registers again under a new lease.
    _, lease = _value(etcd, key)
    _revoke(etcd, lease)
    _, lease2 = _eventually(lambda: (v := _value(etcd, key)) and v[0] and v[1] != lease and v, 15,
                            "re-registration")
    assert lease2 != lease

    # Drain: the key disappears and the process exits 0.
    w.signal(signal.SIGTERM)
    _eventually(lambda: _value(etcd, key)[0] is None, 10, "deregistration")
    assert w.wait_exit(30) == 0


def test_etcd_outage_keeps_serving_and_reregisters(start_worker, etcd):
    w = start_worker({"ETCD_ENDPOINTS": etcd.endpoint, "WORKER_HEARTBEAT_INTERVAL": "100ms"})
    key = PREFIX + f"127.0.0.1:{w.port}"
    _eventually(lambda: _value(etcd, key)[0], 10, "registration")
    etcd.stop()
    try:
        w.submit_calls("outage-1", [("add", [1, 2])])
        assert w.wait_terminal("outage-1").outputs == [b"3"]
        _eventually(lambda: 'blockx_etcd_registration_state{state="retrying"} 1.0' in w.metrics_text(), 10,
                    "the worker to notice the outage")
    finally:
        etcd.start()
    hb = _eventually(lambda: _value(etcd, key)[0], 20, "re-registration after the outage")
    assert hb["ready"] is True
    w.submit_calls("outage-2", [("add", [2, 2])])
    assert w.wait_terminal("outage-2").outputs == [b"4"]


def test_etcd_unreachable_at_start(start_worker):
    # Nothing listens there: the worker serves anyway and keeps retrying.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    w = start_worker({"ETCD_ENDPOINTS": f"127.0.0.1:{port}"})
    w.submit_calls("no-etcd", [("add", [1, 1])])
    assert w.wait_terminal("no-etcd").outputs == [b"2"]
