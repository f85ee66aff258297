"""TaskSession against a real worker: every op, every error code, many tasks on
one stream, watches shared between sessions, broken sessions, drain, a client
that never reads, malformed requests."""
from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time

import grpc
import pytest

from blockx.worker.v1 import worker_pb2 as pb
from tests.support import auth
from tests.support.session import RawSession, kind, submit

pytestmark = pytest.mark.e2e

INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
NOT_FOUND = grpc.StatusCode.NOT_FOUND.value[0]
RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
FAILED_PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION.value[0]
ABORTED = grpc.StatusCode.ABORTED.value[0]
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]


def outputs(result: pb.TaskResult) -> list:
    return [json.loads(o) for o in result.outputs]


async def test_every_op_is_answered_once_with_its_request_id(worker):
    s = RawSession(worker.port)
    try:
        await s.send(pb.SessionRequest(request_id=11, request_slot=pb.RequestTaskSlotRequest(
            task_id="s-op-1", ttl_ms=10_000)))
        (ev,) = await s.events(1)
        assert (ev.request_id, kind(ev), ev.slot.task_id, ev.slot.state) == (
            11, "slot", "s-op-1", pb.TASK_STATE_ALLOCATED)
        slot = ev.slot.slot_id
        # One batch: submit into the slot (followed), a result, and a watch of it.
        await s.send(submit(12, "s-op-1", [("sleep_ms", [150])], slot_id=slot),
                     pb.SessionRequest(request_id=13, get_result=pb.GetTaskResultRequest(task_id="s-op-1")),
                     pb.SessionRequest(request_id=14, watch=pb.WatchTasksRequest(task_ids=["s-op-1"])))
        evs = await s.until(lambda e: kind(e) == "update" and e.update.is_terminal)
        replies = [e for e in evs if e.request_id]
        assert [(e.request_id, kind(e)) for e in replies] == [(12, "submitted"), (13, "result"), (14, "update")]
        assert replies[0].submitted.state == pb.TASK_STATE_RUNNING
        assert replies[1].result.state == pb.TASK_STATE_RUNNING
        assert replies[2].update.state == pb.TASK_STATE_RUNNING and not replies[2].update.is_terminal
        later = [e for e in evs if not e.request_id]
        # RUNNING was already shown: only the terminal update follows, once.
        assert [(e.update.task_id, e.update.state) for e in later] == [("s-op-1", pb.TASK_STATE_SUCCEEDED)]
        assert outputs(later[0].update.result) == [150]
        # Nothing more for that task: the next reply comes with no update before it.
        assert await s.barrier(15, "s-op-1") == []
        # A watch of a finished task answers its terminal state and watches nothing.
        await s.send(pb.SessionRequest(request_id=16, watch=pb.WatchTasksRequest(task_ids=["s-op-1"])))
        (ev,) = await s.events(1)
        assert ev.request_id == 16 and ev.update.is_terminal and outputs(ev.update.result) == [150]
    finally:
        await s.close()


async def test_every_refusal_is_an_error_with_the_unary_code_and_the_session_goes_on(start_worker):
    w = start_worker({"TASK_SLOTS": "2", "RESULT_RETENTION_MS": "60000"})
    s = RawSession(w.port)
    try:
        reqs = [
            pb.SessionRequest(request_id=1),                                                   # no op
            submit(2, "", [("add", [1, 2])]),                                                  # no task id
            pb.SessionRequest(request_id=3, watch=pb.WatchTasksRequest()),                     # no ids
            pb.SessionRequest(request_id=4, get_result=pb.GetTaskResultRequest(task_id="nope")),
            pb.SessionRequest(request_id=5, watch=pb.WatchTasksRequest(task_ids=["nope"])),
            submit(6, "s-err-x", [("add", [1, 2])], slot_id="slot-99"),                        # other pool
            submit(7, "s-err-y", [("add", [1, 2])], call_failure_policy=7),                    # bad enum
        ]
        await s.send(*reqs)
        evs = {e.request_id: e for e in await s.events(len(reqs))}
        assert all(kind(e) == "error" for e in evs.values()), evs
        codes = {rid: e.error.code for rid, e in evs.items()}
        assert codes == {1: INVALID_ARGUMENT, 2: INVALID_ARGUMENT, 3: INVALID_ARGUMENT, 4: NOT_FOUND,
                         5: NOT_FOUND, 6: FAILED_PRECONDITION, 7: INVALID_ARGUMENT}
        assert "no op" in evs[1].error.message and "task_id" in evs[2].error.message
        assert "RequestTaskSlot" in evs[6].error.message and "call_failure_policy" in evs[7].error.message

        # NoSlot and InvalidSlot: two leases fill the pool.
        await s.send(pb.SessionRequest(request_id=8, request_slot=pb.RequestTaskSlotRequest(task_id="a", ttl_ms=300)),
                     pb.SessionRequest(request_id=9, request_slot=pb.RequestTaskSlotRequest(task_id="b", ttl_ms=60_000)),
                     pb.SessionRequest(request_id=10, request_slot=pb.RequestTaskSlotRequest(task_id="c")))
        evs = {e.request_id: e for e in await s.events(3)}
        assert kind(evs[8]) == kind(evs[9]) == "slot"
        assert evs[10].error.code == RESOURCE_EXHAUSTED
        await s.send(submit(11, "c", [("add", [1, 2])], slot_id=evs[8].slot.slot_id))    # a's slot
        (ev,) = await s.events(1)
        assert ev.error.code == FAILED_PRECONDITION and "not reserved for task 'c'" in ev.error.message

        # SlotUncertain: a's lease lapses (the tick reclaims it), then a names its old slot.
        deadline = time.monotonic() + 5
        while True:
            try:
                w.result("a")
            except grpc.RpcError as err:          # NOT_FOUND: never submitted, its lease expired
                assert err.code() == grpc.StatusCode.NOT_FOUND and "expired" in err.details()
                break
            assert time.monotonic() < deadline, "the 300 ms lease never expired"
            await asyncio.sleep(0.05)
        await s.send(submit(12, "a", [("add", [1, 2])], slot_id=evs[8].slot.slot_id))
        (ev,) = await s.events(1)
        assert ev.error.code == ABORTED, ev

        # The session still works after every refusal.
        await s.send(submit(13, "b", [("add", [2, 3])], slot_id=evs[9].slot.slot_id))
        got = await s.until(lambda e: kind(e) == "update" and e.update.is_terminal)
        assert got[0].request_id == 13 and outputs(got[-1].update.result) == [5]
        counts = w.metrics_text()
        assert 'blockx_grpc_requests_total{code="RESOURCE_EXHAUSTED",method="TaskSession/request_slot"} 1.0' in counts
        assert 'blockx_grpc_requests_total{code="OK",method="TaskSession/submit"} 1.0' in counts
    finally:
        await s.close()


async def test_a_thousand_tasks_on_one_session_complete_out_of_order(start_worker):
    w = start_worker({"TASK_SLOTS": "1000"})
    s = RawSession(w.port)
    n = 1000
    rng = random.Random(7)
    delays = [rng.choice([0, 0, 1, 5, 20, 40]) for _ in range(n)]
    try:
        for start in range(0, n, 100):
            await s.send(*[submit(i + 1, f"s-many-{i}", [("sleep_ms", [delays[i]])]) for i in range(start, start + 100)])
        replies: dict[int, int] = {}
        finished: list[str] = []
        while len(finished) < n:
            ev = await s.next_event(30)
            if ev.request_id:
                assert kind(ev) == "submitted", ev
                assert ev.request_id not in replies, "a request was answered twice"
                replies[ev.request_id] = ev.submitted.state
            else:
                assert ev.update.is_terminal, "a followed task showed a state its reply already showed"
                assert outputs(ev.update.result) == [delays[int(ev.update.task_id.rsplit("-", 1)[1])]]
                finished.append(ev.update.task_id)
        assert sorted(replies) == list(range(1, n + 1))
        assert sorted(finished) == sorted(f"s-many-{i}" for i in range(n)), "a task finished twice or never"
        assert finished != [f"s-many-{i}" for i in range(n)], "completions arrived in submit order"
        assert s.batches < n, "events were not batched"
    finally:
        await s.close()


async def test_two_sessions_watching_one_task_each_get_every_state(worker):
    a, b = RawSession(worker.port), RawSession(worker.port)
    try:
        await a.send(submit(1, "s-two", [("sleep_ms", [300])]))
        (ev,) = await a.events(1)
        assert ev.submitted.state == pb.TASK_STATE_RUNNING
        await b.send(pb.SessionRequest(request_id=1, watch=pb.WatchTasksRequest(task_ids=["s-two"])))
        (ev,) = await b.events(1)
        assert ev.update.state == pb.TASK_STATE_RUNNING
        for sess in (a, b):
            (ev,) = await sess.events(1)
            assert (ev.request_id, ev.update.task_id, ev.update.state) == (0, "s-two", pb.TASK_STATE_SUCCEEDED)
            assert outputs(ev.update.result) == [300]
    finally:
        await a.close()
        await b.close()


async def test_a_broken_session_detaches_its_watches_and_the_grace_reclaims_the_task(start_worker):
    w = start_worker({"WATCH_DISCONNECT_GRACE_MS": "400"})
    s = RawSession(w.port)
    await s.send(submit(1, "s-grace", [("sleep_ms", [20_000])]))
    (ev,) = await s.events(1)
    assert ev.submitted.state == pb.TASK_STATE_RUNNING
    await s.close()                                  # the only watcher breaks away
    deadline = time.monotonic() + 5
    while (got := w.result("s-grace")).state != pb.TASK_STATE_FAILED:
        assert time.monotonic() < deadline, "the task was not reclaimed after the Watch grace"
        await asyncio.sleep(0.05)
    assert got.result.failure_code == "WATCH_DISCONNECTED"


async def test_a_broken_session_without_grace_leaves_the_task_running(worker):
    s = RawSession(worker.port)
    await s.send(submit(1, "s-nograce", [("sleep_ms", [400])]))
    (ev,) = await s.events(1)
    assert ev.submitted.state == pb.TASK_STATE_RUNNING
    await s.close()
    res = await asyncio.to_thread(worker.wait_terminal, "s-nograce")
    assert res.state == pb.TASK_STATE_SUCCEEDED and outputs(res) == [400]


async def test_drain_refuses_new_work_delivers_watched_tasks_then_ends_unavailable(start_worker):
    w = start_worker({"DRAIN_TIMEOUT_MS": "20000"})
    s = RawSession(w.port)
    try:
        await s.send(submit(1, "s-drain", [("sleep_ms", [1500])]))
        (ev,) = await s.events(1)
        assert ev.submitted.state == pb.TASK_STATE_RUNNING
        w.signal(signal.SIGTERM)
        await asyncio.to_thread(w.wait_event, "shutdown_requested")
        # Wait until the worker says it drains (a new slot is refused), then check both ops.
        deadline = time.monotonic() + 5
        rid = 100
        while True:
            rid += 1
            await s.send(pb.SessionRequest(request_id=rid, request_slot=pb.RequestTaskSlotRequest(task_id=f"x{rid}")))
            (ev,) = await s.events(1)
            if kind(ev) == "error":
                break
            assert time.monotonic() < deadline, "the worker never refused a slot while draining"
        assert ev.error.code == UNAVAILABLE and "draining" in ev.error.message
        await s.send(submit(2, "s-drain-new", [("add", [1, 2])]))
        (ev,) = await s.events(1)
        assert (ev.request_id, ev.error.code) == (2, UNAVAILABLE)
        (ev,) = await s.events(1, timeout=15)
        assert (ev.update.task_id, ev.update.state) == ("s-drain", pb.TASK_STATE_SUCCEEDED)
        code, details = await s.status(timeout=20)
        assert code == grpc.StatusCode.UNAVAILABLE and "shutting down" in details
        assert await asyncio.to_thread(w.wait_exit) == 0
    finally:
        await s.close()


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def test_a_client_that_never_reads_ends_only_its_own_session_and_memory_stays_bounded(start_worker):
    w = start_worker({"SESSION_MAX_PENDING_EVENTS": "5000", "SESSION_MAX_PENDING_BYTES": "4000000"})
    big = RawSession(w.port)
    other = RawSession(w.port)
    try:
        await other.send(submit(1, "s-big", [("echo", ["x" * 200_000])]))
        await other.until(lambda e: kind(e) == "update" and e.update.is_terminal)
        rss0 = _rss_kib(w.proc.pid)
        # 400 results of ~200 KB asked for in one batch and never read: ~80 MB if nothing
        # bounded them; the session's limit is ~4 MB.
        await big.send(*[pb.SessionRequest(request_id=i + 1, get_result=pb.GetTaskResultRequest(task_id="s-big"))
                         for i in range(400)])
        code, details = await big.status(timeout=20)
        peak = _rss_kib(w.proc.pid)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "stopped reading" in details, (code, details)
        assert peak - rss0 < 48_000, f"the worker grew {peak - rss0} KiB for a client that never reads"
        # The other session is untouched.
        await other.send(submit(2, "s-big-after", [("add", [1, 1])]))
        got = await other.until(lambda e: kind(e) == "update" and e.update.is_terminal)
        assert outputs(got[-1].update.result) == [2]
    finally:
        await big.close()
        await other.close()


async def test_malformed_bytes_end_only_that_stream(worker):
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{worker.port}")
    try:
        raw = channel.stream_stream("/blockx.worker.v1.WorkerService/TaskSession",
                                    request_serializer=None, response_deserializer=None)
        call = raw(metadata=auth.metadata())
        await call.write(b"\xff\xff\xff\xff\x0f not a protobuf")
        code = await asyncio.wait_for(call.code(), 10)
        assert code != grpc.StatusCode.OK
    finally:
        await channel.close()
    s = RawSession(worker.port)
    try:
        await s.send(submit(1, "s-after-garbage", [("add", [2, 2])]))
        got = await s.until(lambda e: kind(e) == "update" and e.update.is_terminal)
        assert outputs(got[-1].update.result) == [4]
    finally:
        await s.close()
    assert worker.proc.poll() is None and os.path.exists(f"/proc/{worker.proc.pid}")


async def test_an_overflow_while_a_write_waits_for_the_client_still_ends_the_session(start_worker):
    # Small request batches: the worker writes each batch's results until the
    # client's flow-control window is full, then its write waits; the results
    # of later requests pile up behind it until the bound ends the session. The
    # client learns why once it reads again: what was sent, then the status.
    w = start_worker({"SESSION_MAX_PENDING_EVENTS": "5000", "SESSION_MAX_PENDING_BYTES": "4000000"})
    big = RawSession(w.port)
    try:
        await big.send(submit(1, "s-window", [("echo", ["x" * 200_000])]))
        await big.until(lambda e: kind(e) == "update" and e.update.is_terminal)

        def ended() -> bool:
            return any("TaskSession ended" in line for line in list(w.lines))
        rid = 1
        while not ended():
            assert rid < 500, "500 unread results of 200 KB never overflowed a 4 MB session bound"
            rid += 1
            await asyncio.wait_for(big.send(pb.SessionRequest(
                request_id=rid, get_result=pb.GetTaskResultRequest(task_id="s-window"))), 5)
            await asyncio.sleep(0.005)
        assert rid > 21, "the bound was hit before any write waited for the client"
        got = 0
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            while True:
                await big.next_event(10)
                got += 1
        assert got < rid - 1, "every result arrived: nothing was dropped at the overflow"
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "stopped reading" in ei.value.details()
    finally:
        await big.close()
