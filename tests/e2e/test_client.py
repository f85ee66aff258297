"""blockx.client against real workers: outcomes, map, watch, slots, typed errors,
the synchronous facade, and a worker that dies under a waiting caller."""
from __future__ import annotations

import asyncio
import signal
import time

import pytest

from blockx.client import (
    InvalidArgument, InvalidSlot, NoSlot, NotFound, SessionBroken, SlotUncertain, Unavailable, WorkerClient,
    connect,
)

pytestmark = pytest.mark.e2e


def addr(w) -> str:
    return f"127.0.0.1:{w.port}"


async def test_submit_returns_the_decoded_outcome(worker):
    async with WorkerClient(addr(worker)) as c:
        o = await c.submit(calls=[("add", [1, 2]), ("add1", [41]), ("sum_squares", [10])], task_id="c-ok")
        assert (o.task_id, o.state, o.outputs, o.failure_code, o.worker) == (
            "c-ok", "SUCCEEDED", [3, 42, 285], "", addr(worker))
        assert o.ok and o.is_terminal and o.statistic["call_count"] == 3 and o.attempts == 1
        bad = await c.submit(calls=[("fail", ["bad input"])])
        assert (bad.state, bad.failure_code, bad.ok) == ("FAILED", "CALL_FAILED", False)
        assert "bad input" in bad.failure_message and len(bad.task_id) == 32      # a generated id
        again = await c.submit(calls=[("add", [9, 9])], task_id="c-ok")        # idempotent: the first result
        assert again.outputs == [3, 42, 285]


async def test_submit_without_wait_then_result_and_watch(worker):
    async with WorkerClient(addr(worker)) as c:
        o = await c.submit([("sleep_ms", [200])], task_id="c-nowait", wait=False)
        assert o.state == "RUNNING" and o.outputs == []
        r = await c.result("c-nowait")
        assert r.state == "RUNNING"
        seen = [(u.state, u.is_terminal) async for u in c.watch(["c-nowait"])]
        assert seen == [("RUNNING", False), ("SUCCEEDED", True)]
        r = await c.result("c-nowait")
        assert (r.state, r.outputs) == ("SUCCEEDED", [200])


async def test_map_yields_every_outcome_as_tasks_finish_beyond_the_slot_pool(start_worker):
    w = start_worker({"TASK_SLOTS": "8"})
    async with WorkerClient(addr(w)) as c:
        outs = [o async for o in c.map("sleep_ms", [[(i * 7) % 30] for i in range(40)], concurrency=16)]
    assert len(outs) == 40 and all(o.ok for o in outs)
    assert sorted(o.outputs[0] for o in outs) == sorted((i * 7) % 30 for i in range(40))
    assert [o.outputs[0] for o in outs] != [(i * 7) % 30 for i in range(40)], "outcomes came in input order"


async def test_slot_lease_then_submit_into_it(worker):
    async with WorkerClient(addr(worker)) as c:
        lease = await c.request_slot("c-slot", ttl_ms=10_000)
        assert (lease.task_id, lease.state) == ("c-slot", "ALLOCATED") and lease.slot_id.startswith("slot-")
        o = await c.submit([("add", [2, 2])], task_id="c-slot", slot_id=lease.slot_id)
        assert o.outputs == [4]


async def test_refusals_raise_typed_errors_with_the_workers_message(start_worker):
    w = start_worker({"TASK_SLOTS": "1"})
    async with WorkerClient(addr(w)) as c:
        with pytest.raises(NotFound, match="'nope' is not known"):
            await c.result("nope")
        with pytest.raises(NotFound):
            async for _ in c.watch(["nope"]):
                pass
        with pytest.raises(InvalidSlot, match="lease a slot on this worker"):
            await c.submit([("add", [1, 1])], slot_id="slot-7")
        with pytest.raises(InvalidArgument, match="slot_id"):
            await c.submit([("add", [1, 1])], slot_id="seven")
        lease = await c.request_slot("c-held", ttl_ms=300)
        with pytest.raises(NoSlot):
            await c.request_slot("c-other")
        deadline = time.monotonic() + 5
        while True:                       # the 300 ms lease lapses on the next tick
            try:
                await c.result("c-held")
            except NotFound:
                break
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        with pytest.raises(SlotUncertain):
            await c.submit([("add", [1, 1])], task_id="c-held", slot_id=lease.slot_id)
        assert (await c.submit([("add", [1, 1])])).outputs == [2]      # the session goes on


def test_the_synchronous_facade(worker):
    with connect(addr(worker)) as c:
        assert c.submit(calls=[("add", [5, 5])]).outputs == [10]
        assert sorted(o.outputs[0] for o in c.map("add1", [1, 2, 3])) == [2, 3, 4]
        c.submit([("sleep_ms", [50])], task_id="c-sync-watch", wait=False)
        assert [u.state for u in c.watch(["c-sync-watch"])][-1] == "SUCCEEDED"
        with pytest.raises(NotFound):
            c.result("nope")


async def test_a_worker_killed_under_a_waiting_submit_raises_instead_of_hanging(start_worker):
    w = start_worker()
    async with WorkerClient(addr(w)) as c:
        waiting = asyncio.ensure_future(c.submit([("sleep_ms", [30_000])], task_id="c-killed"))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        w.signal(signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(SessionBroken) as ei:
            await asyncio.wait_for(waiting, 10)
        assert time.monotonic() - t0 < 10 and ei.value.code.name == "UNAVAILABLE"
        with pytest.raises(SessionBroken):            # later calls fail at once too
            await c.result("c-killed")
    w.wait_exit()


async def test_an_unreachable_worker_is_unavailable():
    c = WorkerClient("127.0.0.1:1", connect_timeout_s=0.5)
    with pytest.raises(Unavailable, match=r"nothing listens at 127.0.0.1:1 \(connection refused\)"):
        await c.connect()


async def test_draining_worker_refuses_submits_with_unavailable(start_worker):
    w = start_worker({"DRAIN_TIMEOUT_MS": "10000"})
    async with WorkerClient(addr(w)) as c:
        running = asyncio.ensure_future(c.submit([("sleep_ms", [800])], task_id="c-drain"))
        await asyncio.sleep(0.2)
        w.signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        while True:
            try:
                await c.request_slot(f"c-probe-{time.monotonic_ns()}")
            except Unavailable as err:
                assert "draining" in err.message
                break
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert (await running).outputs == [800]
    assert w.wait_exit() == 0
