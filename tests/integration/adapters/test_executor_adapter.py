"""ExecutorAdapter over a real Unix socket against fake executors."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import stat
import tempfile

import orjson
import pytest

from blockx.adapters.executor import (BindError, CallNotBound, ExecutorAdapter, ExecutorGone,
                                      SocketPathError)
from blockx.adapters.executor.connection import HEARTBEAT_ACK_FRAME
from blockx.protocol import messages as m

from .fake_executor import FakeExecutor, RecordingHandler, codec, length_prefix, wait_until


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def sock_dir():
    d = tempfile.mkdtemp(prefix="bxa-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
async def env(sock_dir, clock):
    adapter = ExecutorAdapter(os.path.join(sock_dir, "run", "w.sock"), heartbeat_timeout_ms=10000,
                              clock_ms=clock)
    handler = RecordingHandler()
    adapter.handler = handler
    await adapter.start()
    fakes: list[FakeExecutor] = []

    async def attach(executor_id: str, contexts: int = 4, **hb) -> FakeExecutor:
        fake = await FakeExecutor(adapter.socket_path, executor_id, secret=adapter.credentials.issue(executor_id), contexts=contexts).connect()
        fakes.append(fake)
        before = handler.attached.count(executor_id)
        fake.heartbeat(**hb)
        await handler.wait_attached(executor_id, before + 1)
        return fake

    async def connect(executor_id: str) -> FakeExecutor:
        fake = await FakeExecutor(adapter.socket_path, executor_id, secret=adapter.credentials.issue(executor_id)).connect()
        fakes.append(fake)
        return fake

    yield adapter, handler, attach, connect
    await adapter.close()
    for fake in fakes:
        await fake.close()


def execute_payload(attempt: int = 1, task_id: str = "t1") -> dict:
    return m.execute_call("unused", task_id, "add", "d" * 64, [1, 2], attempt)["payload"]


# ---- listener ----

async def test_socket_is_0600_in_a_0700_directory_and_unlinked_on_close(sock_dir):
    path = os.path.join(sock_dir, "a", "b", "w.sock")
    adapter = ExecutorAdapter(path)
    await adapter.start()
    try:
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    finally:
        await adapter.close()
    assert not os.path.exists(path)


async def test_refuses_a_directory_others_can_enter(sock_dir):
    shared = os.path.join(sock_dir, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o755)
    with pytest.raises(SocketPathError, match="mode 0755"):
        await ExecutorAdapter(os.path.join(shared, "w.sock")).start()


async def test_refuses_a_symlinked_directory(sock_dir):
    real = os.path.join(sock_dir, "real")
    os.mkdir(real, 0o700)
    os.symlink(real, os.path.join(sock_dir, "link"))
    with pytest.raises(SocketPathError, match="symlink"):
        await ExecutorAdapter(os.path.join(sock_dir, "link", "w.sock")).start()


async def test_refuses_a_non_socket_file_and_a_live_listener(sock_dir):
    path = os.path.join(sock_dir, "w.sock")
    with open(path, "w") as f:
        f.write("x")
    with pytest.raises(SocketPathError, match="not a socket"):
        await ExecutorAdapter(path).start()
    os.unlink(path)
    first = ExecutorAdapter(path)
    await first.start()
    try:
        with pytest.raises(SocketPathError, match="another process is listening"):
            await ExecutorAdapter(path).start()
    finally:
        await first.close()


async def test_stale_socket_file_is_replaced(sock_dir):
    path = os.path.join(sock_dir, "w.sock")
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(path)
    dead.close()  # bound, never listening: what a crashed Worker leaves behind
    adapter = ExecutorAdapter(path)
    await adapter.start()
    try:
        fake = await FakeExecutor(path, "exec-0").connect()
        await fake.close()
    finally:
        await adapter.close()


async def test_path_too_long_is_a_clear_error(sock_dir):
    with pytest.raises(SocketPathError, match="at most 107"):
        await ExecutorAdapter(os.path.join(sock_dir, "x" * 120, "w.sock")).start()


# ---- attach, heartbeat, snapshots ----

async def test_attach_on_first_heartbeat_with_snapshot_and_ack(env, clock):
    adapter, handler, attach, connect = env
    fake = await connect("exec-0")
    await wait_until(lambda: len(adapter._pending) == 1, what="the connection accepted")
    assert handler.attached == [] and adapter.executor_ids() == []  # no Heartbeat yet: not attached
    clock.now = 5000
    fake.heartbeat(runnableCount=2, memoryBytes=777, runningCallId="t1/c-3",
                   lastSchedulerActiveAtMs=900, sentAtMs=1000, cpuUserMs=5, cpuSystemMs=6)
    await handler.wait_attached("exec-0")
    await fake.wait_frames(m.HEARTBEAT_ACK)
    assert adapter.executor_ids() == ["exec-0"] and adapter.healthy_count() == 1
    (snap,) = adapter.snapshots()
    assert snap.executor_id == "exec-0" and snap.healthy
    assert (snap.runnable_count, snap.inflight_count, snap.memory_bytes) == (2, 0, 777)
    assert (snap.capacity, snap.usable_contexts, snap.free_contexts) == (4, 4, 4)
    assert snap.heartbeat_seq == 1 and snap.pid == os.getpid()
    assert snap.running_call_id == "t1/c-3"
    # executor-side age 100 ms, translated into the adapter's clock
    assert snap.last_scheduler_active_at_ms == 4900
    assert snap.attached_at_ms == 5000 and snap.last_heartbeat_at_ms == 5000
    assert (snap.cpu_user_ms, snap.cpu_system_ms) == (5, 6)
    assert adapter.pid_of("exec-0") == os.getpid()  # SO_PEERCRED of the fake (this process)

    clock.now = 6000
    fake.inflight = 1
    fake.heartbeat(lastSchedulerActiveAtMs=1500, sentAtMs=2000)
    await fake.wait_frames(m.HEARTBEAT_ACK, 2)
    (snap,) = adapter.snapshots()
    assert snap.heartbeat_seq == 2 and snap.inflight_count == 1 and snap.capacity == 4
    assert snap.last_scheduler_active_at_ms == 5500
    assert handler.attached == ["exec-0"]  # later heartbeats do not re-attach


async def test_scheduler_activity_without_send_time_tracks_movement(env, clock):
    adapter, handler, attach, connect = env
    clock.now = 100
    fake = await attach("exec-0", lastSchedulerActiveAtMs=7, sentAtMs=0)
    assert adapter.snapshots()[0].last_scheduler_active_at_ms == 100
    clock.now = 200
    fake.heartbeat(lastSchedulerActiveAtMs=7, sentAtMs=0)  # stalled: keeps the old time
    await fake.wait_frames(m.HEARTBEAT_ACK, 2)
    assert adapter.snapshots()[0].last_scheduler_active_at_ms == 100
    clock.now = 300
    fake.heartbeat(lastSchedulerActiveAtMs=9, sentAtMs=0)
    await fake.wait_frames(m.HEARTBEAT_ACK, 3)
    assert adapter.snapshots()[0].last_scheduler_active_at_ms == 300


# ---- reservations ----

async def test_bind_unbind_and_capacity(env):
    adapter, handler, attach, connect = env
    await attach("exec-0", contexts=2)
    with pytest.raises(BindError) as err:
        adapter.bind("c1", "exec-9")
    assert err.value.reason == "executor_unknown" and err.value.retryable
    adapter.bind("c1", "exec-0")
    with pytest.raises(BindError) as err:
        adapter.bind("c1", "exec-0")
    assert err.value.reason == "already_bound"
    adapter.bind("c2", "exec-0")
    with pytest.raises(BindError) as err:
        adapter.bind("c3", "exec-0")
    assert err.value.reason == "no_context"
    snap = adapter.snapshots()[0]
    assert (snap.reserved_count, snap.free_contexts, snap.usable_contexts) == (2, 0, 2)
    adapter.unbind("c1", "exec-0")
    adapter.unbind("c1", "exec-0")  # idempotent
    adapter.unbind("c1", "exec-9")  # unknown executor: no-op
    assert not adapter.is_bound("c1", "exec-0")
    adapter.bind("c3", "exec-0")
    assert adapter.snapshots()[0].reserved_count == 2


async def test_configured_executor_contexts_fix_the_capacity(sock_dir):
    adapter = ExecutorAdapter(os.path.join(sock_dir, "w.sock"), executor_contexts=3)
    handler = adapter.handler = RecordingHandler()
    await adapter.start()
    fake = await FakeExecutor(adapter.socket_path, "exec-0", secret=adapter.credentials.issue("exec-0"), contexts=4).connect()
    try:
        # one subcall in flight inflates the heartbeat estimate (2 + 3 = 5)
        fake.heartbeat(inflightCount=3, availableContexts=2)
        await handler.wait_attached("exec-0")
        snap = adapter.snapshots()[0]
        assert (snap.capacity, snap.usable_contexts, snap.free_contexts) == (3, 3, 3)
        for cid in ("c1", "c2", "c3"):
            adapter.bind(cid, "exec-0")
        with pytest.raises(BindError):
            adapter.bind("c4", "exec-0")
    finally:
        await adapter.close()
        await fake.close()
    with pytest.raises(ValueError):
        ExecutorAdapter("/tmp/x.sock", executor_contexts=-1)


async def test_bind_subcall_needs_a_live_parent_reservation(env):
    adapter, handler, attach, connect = env
    fake = await attach("exec-0", contexts=1)
    with pytest.raises(BindError) as err:
        adapter.bind_subcall("p/sub-1", "p", "exec-0")
    assert err.value.reason == "parent_not_bound"
    adapter.bind("p", "exec-0")
    adapter.send_execute_call("exec-0", "p", execute_payload())
    adapter.bind_subcall("p/sub-1", "p", "exec-0")  # beside its parent: no capacity check
    assert adapter.snapshots()[0].reserved_count == 2
    adapter.mark_draining("p", "exec-0")
    with pytest.raises(BindError) as err:
        adapter.bind_subcall("p/sub-2", "p", "exec-0")
    assert err.value.reason == "parent_draining"
    with pytest.raises(BindError) as err:
        adapter.bind("p", "exec-0")
    assert err.value.reason == "call_draining"
    await fake.wait_frames(m.EXECUTE_CALL)


async def test_bind_subcall_refuses_a_bound_child_and_an_unknown_executor(env):
    adapter, handler, attach, connect = env
    await attach("exec-0", contexts=1)
    adapter.bind("p", "exec-0")
    adapter.bind_subcall("p/sub-1", "p", "exec-0")
    with pytest.raises(BindError) as err:
        adapter.bind_subcall("p/sub-1", "p", "exec-0")
    assert err.value.reason == "already_bound"
    with pytest.raises(BindError) as err:
        adapter.bind_subcall("p/sub-2", "p", "exec-9")
    assert err.value.reason == "executor_unknown"
    assert adapter.snapshots()[0].reserved_count == 2       # refusals reserved nothing


async def test_execute_call_and_one_batch_per_chunk_after_release(env):
    adapter, handler, attach, connect = env
    fake = await attach("exec-0")
    adapter.bind("c1", "exec-0")
    adapter.bind("c2", "exec-0")
    adapter.send_execute_call("exec-0", "c1", execute_payload(attempt=1))
    adapter.send_execute_call("exec-0", "c2", execute_payload(attempt=3))
    frames = await fake.wait_frames(m.EXECUTE_CALL, 2)
    (env1, side1), (env2, _) = frames
    assert (env1["callId"], env2["callId"]) == ("c1", "c2") and side1 is None
    assert env1["payload"]["args"] == [1, 2] and env2["payload"]["attemptSeq"] == 3

    seen_bound = []
    handler.hook = lambda eid, batch: seen_bound.append(
        (adapter.is_bound("c1", "exec-0"), adapter.is_bound("c2", "exec-0")))
    fake.send(fake.complete("c1", 1, {"sum": 3}),
              m.call_waiting_io("c2", "r1", "t1", 3, "devstub", {"k": 1}),
              m.call_failed("c2", "t1", 3, m.USER_ERROR, False, "boom"))
    await handler.wait_frames("exec-0", 3)
    assert len(handler.batches) == 1  # one chunk -> one callback
    eid, batch = handler.batches[0]
    assert [f[0]["messageType"] for f in batch] == [m.CALL_COMPLETED, m.CALL_WAITING, m.CALL_FAILED]
    assert batch[0][0]["payload"]["output"] == {"sum": 3}
    assert batch[2][0]["payload"]["errorStack"] == ""  # validated, defaults filled
    assert seen_bound == [(False, False)]  # released before the callback ran
    assert adapter.snapshots()[0].reserved_count == 0


async def test_waiting_frame_with_sidecar_reaches_the_handler(env):
    adapter, handler, attach, connect = env
    fake = await attach("exec-0")
    adapter.bind("c1", "exec-0")
    adapter.send_execute_call("exec-0", "c1", execute_payload())
    fake.send(m.call_waiting_io("c1", "r1", "t1", 1, "devstub", {"k": 1}), sidecar=b"\x00\xffraw")
    (frame,) = await handler.wait_frames("exec-0")
    assert frame[1] == b"\x00\xffraw" and frame[0]["requestId"] == "r1"


async def test_stale_attempt_frame_does_not_release_a_newer_attempt(env):
    adapter, handler, attach, connect = env
    fake = await attach("exec-0")
    adapter.bind("c1", "exec-0")
    adapter.send_execute_call("exec-0", "c1", execute_payload(attempt=1))
    adapter.unbind("c1", "exec-0")  # e.g. a synthesized failure; attempt 1 still runs
    adapter.bind("c1", "exec-0")
    # attempt 1 ends before attempt 2 went out: no attempt of c1 is dispatched
    # here now, so the frame is refused (the dispatcher would drop it as stale).
    fake.send(fake.complete("c1", 1))
    await wait_until(lambda: adapter.refused_frames_total == 1, what="the frame refused")
    assert adapter.is_bound("c1", "exec-0") and handler.frames_of("exec-0") == []
    adapter.send_execute_call("exec-0", "c1", execute_payload(attempt=2))
    fake.send(fake.complete("c1", 1))   # a call sent here: delivered, its attempt is the core's business
    await handler.wait_frames("exec-0", 1)
    assert adapter.is_bound("c1", "exec-0")
    fake.send(fake.complete("c1", 2))
    await handler.wait_frames("exec-0", 2)
    assert not adapter.is_bound("c1", "exec-0")


async def test_draining_keeps_the_context_until_the_terminal_frame(env):
    adapter, handler, attach, connect = env
    fake = await attach("exec-0", contexts=1)
    adapter.bind("c1", "exec-0")
    adapter.send_execute_call("exec-0", "c1", execute_payload(attempt=4))
    adapter.mark_draining("c1", "exec-0")
    assert adapter.is_draining("c1", "exec-0")
    adapter.unbind("c1", "exec-0")  # a draining reservation is kept
    assert adapter.is_bound("c1", "exec-0")
    snap = adapter.snapshots()[0]
    assert (snap.draining_count, snap.usable_contexts, snap.free_contexts) == (1, 0, 0)
    await adapter.send_cancel_call("exec-0", "c1", "subtree cancelled", 4)
    (cancel,) = await fake.wait_frames(m.CANCEL_CALL)
    assert cancel[0]["callId"] == "c1"
    assert cancel[0]["payload"] == {"reason": "subtree cancelled", "attemptSeq": 4}
    with pytest.raises(BindError):
        adapter.bind("c2", "exec-0")
    fake.send(m.call_failed("c1", "t1", 4, m.CANCELLED, False, "cancelled"))
    await handler.wait_frames("exec-0")
    assert not adapter.is_draining("c1", "exec-0") and not adapter.is_bound("c1", "exec-0")
    adapter.bind("c2", "exec-0")


async def test_cancel_before_dispatch_releases_at_once(env):
    adapter, handler, attach, connect = env
    await attach("exec-0", contexts=1)
    adapter.bind("c1", "exec-0")
    adapter.mark_draining("c1", "exec-0")  # no ExecuteCall went out: nothing to drain
    assert not adapter.is_bound("c1", "exec-0") and not adapter.is_draining("c1", "exec-0")
    with pytest.raises(CallNotBound, match="no reservation"):
        adapter.send_execute_call("exec-0", "c1", execute_payload())
    adapter.bind("c2", "exec-0")


async def test_send_execute_call_errors(env):
    adapter, handler, attach, connect = env
    await attach("exec-0")
    with pytest.raises(ExecutorGone):
        adapter.send_execute_call("exec-9", "c1", execute_payload())
    with pytest.raises(CallNotBound, match="bind it first"):
        adapter.send_execute_call("exec-0", "c1", execute_payload())
    adapter.bind("c1", "exec-0")
    adapter.send_execute_call("exec-0", "c1", execute_payload())
    with pytest.raises(CallNotBound, match="already dispatched"):
        adapter.send_execute_call("exec-0", "c1", execute_payload())


async def test_a_burst_past_the_outbox_depth_waits_instead_of_failing(sock_dir):
    # More ExecuteCalls to one executor in one loop iteration than its outbox
    # holds: none is refused (no attempt spent), all arrive, in order.
    adapter = ExecutorAdapter(os.path.join(sock_dir, "w.sock"), outbox_depth=2, outbox_max_batch=2)
    handler = adapter.handler = RecordingHandler()
    await adapter.start()
    fake = await FakeExecutor(adapter.socket_path, "exec-0", secret=adapter.credentials.issue("exec-0"), contexts=8).connect()
    try:
        fake.heartbeat()
        await handler.wait_attached("exec-0")
        await fake.wait_frames(m.HEARTBEAT_ACK)
        ids = [f"c{i}" for i in range(7)]
        for cid in ids:
            adapter.bind(cid, "exec-0")
        for cid in ids:                    # nothing flushed yet in this loop iteration
            adapter.send_execute_call("exec-0", cid, execute_payload())
        assert all(adapter.is_bound(cid, "exec-0") for cid in ids)
        got = await fake.wait_frames(m.EXECUTE_CALL, 7)
        assert [f[0]["callId"] for f in got] == ids
        for cid in ids:                    # each was dispatched once: a second send is refused
            with pytest.raises(CallNotBound, match="already dispatched"):
                adapter.send_execute_call("exec-0", cid, execute_payload())
    finally:
        await adapter.close()
        await fake.close()


async def test_send_resume_call_returns_once_written(env):
    adapter, handler, attach, connect = env
    fake = await attach("exec-0")
    payload = m.resume_call_result("c1", "r7", m.WAIT_IO, {"rows": 2})["payload"]
    await adapter.send_resume_call("exec-0", "c1", "r7", payload, b"BODY")
    (frame,) = await fake.wait_frames(m.RESUME_CALL)
    assert frame[0]["requestId"] == "r7" and frame[0]["payload"]["result"] == {"rows": 2}
    assert frame[1] == b"BODY"
    with pytest.raises(ExecutorGone):
        await adapter.send_resume_call("exec-9", "c1", "r7", payload)


async def test_pending_resume_fails_with_executor_gone_when_the_executor_is_lost(env, clock):
    adapter, handler, attach, connect = env
    await attach("exec-0")
    payload = m.resume_call_result("c1", "r1", m.WAIT_IO, 1)["payload"]
    task = asyncio.get_running_loop().create_task(
        adapter.send_resume_call("exec-0", "c1", "r1", payload))
    await asyncio.sleep(0)  # the send is queued, its flush not yet run
    clock.now += 60_000
    assert adapter.check_heartbeat_timeouts(clock.now) == ["exec-0"]
    with pytest.raises(ExecutorGone):
        await asyncio.wait_for(task, 3)


class Told:
    """A resume waiter (Outbox.enqueue_notify): records what it was told."""

    def __init__(self):
        self.outcome = None

    def done(self):
        return self.outcome is not None

    def set_result(self, value):
        self.outcome = ("written",)

    def set_exception(self, exc):
        self.outcome = ("failed", exc)


async def test_post_resume_call_queues_at_once_and_tells_the_waiter_once_written(env):
    adapter, handler, attach, connect = env
    fake = await attach("exec-0")
    payload = m.resume_call_result("c1", "r7", m.WAIT_IO, {"rows": 2})["payload"]
    told = Told()
    assert adapter.post_resume_call("exec-0", "c1", "r7", payload, b"BODY", told) is True
    assert told.outcome is None                          # queued, not yet handed to the transport
    await wait_until(lambda: told.outcome, what="waiter told")
    assert told.outcome == ("written",)
    (frame,) = await fake.wait_frames(m.RESUME_CALL)
    assert frame[0]["requestId"] == "r7" and frame[0]["payload"]["result"] == {"rows": 2}
    assert frame[1] == b"BODY"
    with pytest.raises(ExecutorGone):
        adapter.post_resume_call("exec-9", "c1", "r7", payload, None, Told())


async def test_post_resume_result_sends_the_frame_post_resume_call_would(env):
    adapter, handler, attach, connect = env
    fake = await attach("exec-0")
    told = [Told(), Told()]
    assert adapter.post_resume_result("exec-0", "c1", "r7", m.WAIT_SUBCALL, b'{"n":[1,2]}', 12, told[0]) is True
    payload = {"resumeKind": m.WAIT_SUBCALL, "result": {"n": [1, 2]}, "budgetUsedMs": 12}
    assert adapter.post_resume_call("exec-0", "c1", "r7", payload, None, told[1]) is True
    await wait_until(lambda: told[1].outcome, what="both written")
    assert told[0].outcome == ("written",)
    templated, general = await fake.wait_frames(m.RESUME_CALL, 2)
    assert templated == general and templated[0]["payload"] == payload and templated[1] is None
    with pytest.raises(ExecutorGone):
        adapter.post_resume_result("exec-9", "c1", "r7", m.WAIT_SUBCALL, b"1", 0, Told())


async def test_post_resume_call_refuses_when_the_outbox_is_full(sock_dir):
    adapter = ExecutorAdapter(os.path.join(sock_dir, "w.sock"), outbox_depth=2)
    handler = adapter.handler = RecordingHandler()
    await adapter.start()
    fake = await FakeExecutor(adapter.socket_path, "exec-0", secret=adapter.credentials.issue("exec-0"), contexts=8).connect()
    try:
        fake.heartbeat()
        await handler.wait_attached("exec-0")
        await fake.wait_frames(m.HEARTBEAT_ACK)
        payload = m.resume_call_result("c1", "r1", m.WAIT_IO, 1)["payload"]
        told = [Told() for _ in range(3)]
        assert adapter.post_resume_call("exec-0", "c1", "r1", payload, None, told[0])
        assert adapter.post_resume_call("exec-0", "c2", "r2", payload, None, told[1])
        assert adapter.post_resume_call("exec-0", "c3", "r3", payload, None, told[2]) is False
        assert adapter.post_resume_result("exec-0", "c3", "r3", m.WAIT_IO, b"1", 0, told[2]) is False
        await wait_until(lambda: told[1].outcome, what="the two queued ones written")
        assert told[2].outcome is None                   # nothing was queued for it
        await adapter.send_resume_call("exec-0", "c3", "r3", payload)   # the awaiting fallback
        frames = await fake.wait_frames(m.RESUME_CALL, 3)
        assert [f[0]["callId"] for f in frames] == ["c1", "c2", "c3"]
    finally:
        await adapter.close()
        await fake.close()


async def test_a_posted_resume_fails_its_waiter_when_the_executor_is_lost_first(env, clock):
    adapter, handler, attach, connect = env
    await attach("exec-0")
    payload = m.resume_call_result("c1", "r1", m.WAIT_IO, 1)["payload"]
    told = Told()
    assert adapter.post_resume_call("exec-0", "c1", "r1", payload, None, told)
    clock.now += 60_000
    assert adapter.check_heartbeat_timeouts(clock.now) == ["exec-0"]
    assert told.outcome[0] == "failed" and isinstance(told.outcome[1], ExecutorGone)


# ---- malformed input closes only that connection ----

GARBAGE = [
    pytest.param(b"\x00\x00\x00\x05hello", "BadMagic", id="garbage"),
    pytest.param(length_prefix(64 * 1024 * 1024), "FrameTooLarge", id="oversize-length"),
    pytest.param(length_prefix(10) + b"BXB1" + length_prefix(50) + b"{}", "JsonLengthOutOfRange",
                 id="bxb1-json-length-past-end"),
    pytest.param(length_prefix(10) + b"BXB1" + length_prefix(2) + b"[]", "NotAnObject",
                 id="non-object-json"),
    pytest.param(length_prefix(5) + b"{nope", "InvalidJson", id="invalid-json"),
    pytest.param(codec.encode_frame(m.execute_call("c1", "t1", "f", "d", [], 1)), "not accepted",
                 id="worker-only-message-type"),
    pytest.param(codec.encode_frame({"messageType": "CallCompleted", "callId": "c1",
                                     "requestId": "", "payload": {"attemptSeq": 1}}),
                 "taskId", id="payload-missing-key"),
    pytest.param(codec.encode_frame({"messageType": "Nonsense", "callId": "c1"}),
                 "unknown messageType", id="unknown-message-type"),
]


@pytest.mark.parametrize("data, reason_part", GARBAGE)
async def test_malformed_frame_closes_only_that_connection(env, data, reason_part):
    adapter, handler, attach, connect = env
    bad = await attach("exec-bad")
    good = await attach("exec-good")
    bad.send_raw(data)
    reason = await handler.wait_lost("exec-bad")
    if reason_part:
        assert reason_part in reason
    await bad.wait_eof()
    assert adapter.executor_ids() == ["exec-good"]
    assert adapter.malformed_total == 1
    adapter.bind("c1", "exec-good")
    adapter.send_execute_call("exec-good", "c1", execute_payload())
    await good.wait_frames(m.EXECUTE_CALL)
    good.send(good.complete("c1"))
    await handler.wait_frames("exec-good")
    assert [e for e, _ in handler.lost] == ["exec-bad"]


async def test_frame_before_heartbeat_is_a_protocol_error(env, clock):
    adapter, handler, attach, connect = env
    good = await attach("exec-good")
    early = await connect("exec-early")
    early.send(early.complete("c1"))
    await early.wait_eof()
    assert handler.lost == [] and adapter.malformed_total == 1  # never attached: nothing to report
    assert adapter.executor_ids() == ["exec-good"]
    good.heartbeat()
    await good.wait_frames(m.HEARTBEAT_ACK, 2)


async def test_valid_frames_before_garbage_in_one_chunk_are_delivered_first(env):
    adapter, handler, attach, connect = env
    fake = await attach("exec-0")
    adapter.bind("c1", "exec-0")
    adapter.send_execute_call("exec-0", "c1", execute_payload())
    fake.send_raw(codec.encode_frame(fake.complete("c1")) + b"\x00\x00\x00\x02xx")
    await handler.wait_lost("exec-0")
    assert [f[0]["callId"] for f in handler.frames_of("exec-0")] == ["c1"]


async def test_heartbeat_with_another_executor_id_is_a_protocol_error(env):
    adapter, handler, attach, connect = env
    fake = await attach("exec-0")
    fake.send(m.heartbeat("exec-1", 1, 2, 0, 0, 4, 0, 0))
    reason = await handler.wait_lost("exec-0")
    assert "executorId changed" in reason
    assert handler.attached == ["exec-0"]


async def test_negative_capacity_in_heartbeat_is_rejected(env):
    adapter, handler, attach, connect = env
    fake = await attach("exec-0")
    fake.heartbeat(availableContexts=-3)
    assert "availableContexts" in await handler.wait_lost("exec-0")


async def test_a_failing_handler_does_not_break_the_connection(env):
    adapter, handler, attach, connect = env
    fake = await attach("exec-0")

    def boom(eid, frames):
        raise RuntimeError("orchestrator bug")

    for cid in ("c1", "c2"):
        adapter.bind(cid, "exec-0")
        adapter.send_execute_call("exec-0", cid, execute_payload())
    handler.hook = boom
    fake.send(fake.complete("c1"))
    await handler.wait_frames("exec-0", 1)
    handler.hook = None
    fake.send(fake.complete("c2"))
    await handler.wait_frames("exec-0", 2)
    assert adapter.executor_ids() == ["exec-0"] and adapter.handler_errors_total == 1


async def test_executor_closing_its_connection_is_reported_lost(env):
    adapter, handler, attach, connect = env
    fake = await attach("exec-0")
    adapter.bind("c1", "exec-0")
    fake.send_raw(b"\x00\x00")  # half a length prefix, then EOF
    await fake.close()
    reason = await handler.wait_lost("exec-0")
    assert "closed by the executor" in reason and "length prefix" in reason
    assert adapter.executor_ids() == [] and not adapter.is_bound("c1", "exec-0")
    with pytest.raises(BindError):
        adapter.bind("c2", "exec-0")


# ---- heartbeat timeout, reconnect, close ----

async def test_heartbeat_timeout_declares_lost(env, clock):
    adapter, handler, attach, connect = env
    clock.now = 10_000
    a = await attach("exec-a")
    silent = await connect("exec-silent")  # connects, never heartbeats
    await wait_until(lambda: len(adapter._pending) == 1, what="pending connection")
    clock.now = 15_000
    b = await attach("exec-b")
    assert adapter.check_heartbeat_timeouts(20_000) == []
    assert adapter.check_heartbeat_timeouts(20_001) == ["exec-a"]
    assert adapter.heartbeat_timeouts_total == 1
    assert "heartbeat timeout" in await handler.wait_lost("exec-a")
    await a.wait_eof()
    await silent.wait_eof()
    assert not adapter._pending
    assert adapter.executor_ids() == ["exec-b"]
    b.heartbeat()
    await b.wait_frames(m.HEARTBEAT_ACK, 2)
    assert adapter.check_heartbeat_timeouts(25_000) == []


async def test_a_second_connection_for_a_live_executor_is_refused_and_the_live_one_stays(env):
    adapter, handler, attach, connect = env
    live = await attach("exec-0", contexts=2)
    adapter.bind("c1", "exec-0")
    adapter.send_execute_call("exec-0", "c1", execute_payload())
    await live.wait_frames(m.EXECUTE_CALL)
    # Even with a valid secret (the pool issued a new one): the id is taken.
    second = await connect("exec-0")
    second.secret = adapter.credentials.issue("exec-0")
    second.heartbeat()
    await second.wait_eof()
    assert handler.attached == ["exec-0"] and handler.lost == [] and adapter.attach_refused_total == 1
    assert second.of_type(m.HEARTBEAT_ACK) == [] and second.of_type(m.EXECUTE_CALL) == []
    assert adapter.is_bound("c1", "exec-0")
    live.send(live.complete("c1"))
    await handler.wait_frames("exec-0", 1)


async def test_after_the_connection_is_lost_a_fresh_secret_starts_a_new_era(env):
    adapter, handler, attach, connect = env
    old = await attach("exec-0", contexts=2)
    adapter.bind("c1", "exec-0")
    adapter.send_execute_call("exec-0", "c1", execute_payload())
    await old.close()
    await handler.wait_lost("exec-0")
    assert not adapter.is_bound("c1", "exec-0")
    new = await attach("exec-0", contexts=2)      # a respawned executor, with its new secret
    assert handler.attached == ["exec-0", "exec-0"]
    adapter.bind("c1", "exec-0")  # the new era accepts the retried calls
    adapter.send_execute_call("exec-0", "c1", execute_payload(attempt=2))
    (frame,) = await new.wait_frames(m.EXECUTE_CALL)
    assert frame[0]["payload"]["attemptSeq"] == 2


async def test_close_reports_every_executor_lost_and_removes_the_socket(sock_dir):
    adapter = ExecutorAdapter(os.path.join(sock_dir, "w.sock"))
    handler = adapter.handler = RecordingHandler()
    await adapter.start()
    fakes = [await FakeExecutor(adapter.socket_path, f"exec-{i}", secret=adapter.credentials.issue(f"exec-{i}")).connect() for i in range(2)]
    for fake in fakes:
        fake.heartbeat()
    await handler.wait_attached("exec-1")
    await handler.wait_attached("exec-0")
    await adapter.close()
    assert sorted(e for e, _ in handler.lost) == ["exec-0", "exec-1"]
    assert not os.path.exists(adapter.socket_path)
    for fake in fakes:
        await fake.wait_eof()
        await fake.close()
    with pytest.raises(ExecutorGone):
        adapter.send_execute_call("exec-0", "c1", execute_payload())


async def test_heartbeat_ack_frame_is_a_valid_worker_message():
    (env, side), = codec.FrameDecoder().feed(HEARTBEAT_ACK_FRAME)
    m.validate(env, m.WORKER_TO_EXECUTOR)
    assert env["messageType"] == m.HEARTBEAT_ACK and side is None
    assert orjson.loads(HEARTBEAT_ACK_FRAME[4:])["messageType"] == "HeartbeatAck"


# ---- ExecuteCallBatch negotiation ----

@pytest.fixture
async def batching(sock_dir):
    adapter = ExecutorAdapter(os.path.join(sock_dir, "w.sock"), execute_call_batch=True)
    handler = adapter.handler = RecordingHandler()
    await adapter.start()
    fakes = []

    async def attach(executor_id, **hb):
        fake = await FakeExecutor(adapter.socket_path, executor_id, secret=adapter.credentials.issue(executor_id), contexts=8).connect()
        fakes.append(fake)
        fake.heartbeat(**hb)
        await handler.wait_attached(executor_id)
        await fake.wait_frames(m.HEARTBEAT_ACK)
        return fake

    yield adapter, handler, attach
    await adapter.close()
    for fake in fakes:
        await fake.close()


def send_burst(adapter, executor_id, call_ids):
    for i, cid in enumerate(call_ids):
        adapter.bind(cid, executor_id)
        adapter.send_execute_call(executor_id, cid, execute_payload(attempt=i + 1))


async def test_a_burst_to_an_executor_with_the_feature_is_one_batch_frame(batching):
    adapter, handler, attach = batching
    fake = await attach("exec-0", features=[m.FEATURE_EXECUTE_CALL_BATCH])
    send_burst(adapter, "exec-0", ["c1", "c2", "c3"])
    (env, _), = await fake.wait_frames(m.EXECUTE_CALL_BATCH)
    items = m.execute_call_batch_items(m.validate(env, m.WORKER_TO_EXECUTOR))
    assert [(e["callId"], e["payload"]["attemptSeq"]) for e in items] == [("c1", 1), ("c2", 2), ("c3", 3)]
    assert not fake.of_type(m.EXECUTE_CALL)
    # reservations and attempts are exactly as with single frames
    with pytest.raises(CallNotBound, match="attempt 2 was already dispatched"):
        adapter.send_execute_call("exec-0", "c2", execute_payload(attempt=2))
    fake.send(fake.complete("c1", 1), fake.complete("c2", 2), fake.complete("c3", 3))
    await handler.wait_frames("exec-0", 3)
    await wait_until(lambda: adapter.snapshots()[0].reserved_count == 0, what="reservations released")
    send_burst(adapter, "exec-0", ["c4"])             # a lone call travels as a plain ExecuteCall
    (env, _), = await fake.wait_frames(m.EXECUTE_CALL)
    assert env["callId"] == "c4"


async def test_an_executor_without_the_feature_only_gets_single_frames(batching):
    adapter, handler, attach = batching
    fake = await attach("exec-0")                     # no features in its Heartbeat
    send_burst(adapter, "exec-0", ["c1", "c2", "c3"])
    frames = await fake.wait_frames(m.EXECUTE_CALL, 3)
    assert [e["callId"] for e, _ in frames] == ["c1", "c2", "c3"]
    later = await attach("exec-1", features=["somethingElse"])
    send_burst(adapter, "exec-1", ["d1", "d2"])
    await later.wait_frames(m.EXECUTE_CALL, 2)
    # features named in a later Heartbeat change nothing: the attaching one decided
    fake.heartbeat(features=[m.FEATURE_EXECUTE_CALL_BATCH])
    await fake.wait_frames(m.HEARTBEAT_ACK, 2)
    send_burst(adapter, "exec-0", ["c4", "c5"])
    await fake.wait_frames(m.EXECUTE_CALL, 5)
    assert not fake.of_type(m.EXECUTE_CALL_BATCH) and not later.of_type(m.EXECUTE_CALL_BATCH)


async def test_batching_off_sends_single_frames_even_to_an_executor_with_the_feature(env):
    adapter, handler, attach, connect = env
    assert adapter.execute_call_batch is False       # the default
    fake = await attach("exec-0", features=[m.FEATURE_EXECUTE_CALL_BATCH])
    send_burst(adapter, "exec-0", ["c1", "c2"])
    await fake.wait_frames(m.EXECUTE_CALL, 2)
    assert not fake.of_type(m.EXECUTE_CALL_BATCH)


async def test_an_execute_call_batch_sent_to_the_worker_closes_only_that_connection(batching):
    adapter, handler, attach = batching
    bad = await attach("exec-0", features=[m.FEATURE_EXECUTE_CALL_BATCH])
    good = await attach("exec-1", features=[m.FEATURE_EXECUTE_CALL_BATCH])
    bad.send(m.execute_call_batch([m.execute_call("x", "t1", "add", "d" * 64, [], 1)]))
    await bad.wait_eof()
    assert handler.lost and handler.lost[0][0] == "exec-0" and "not accepted" in handler.lost[0][1]
    assert adapter.malformed_total == 1 and adapter.executor_ids() == ["exec-1"]
    send_burst(adapter, "exec-1", ["c1", "c2"])
    await good.wait_frames(m.EXECUTE_CALL_BATCH)


# ---- flush_now: answers written before the loop iteration ends ----


async def test_flush_now_writes_what_is_queued_for_the_executor_at_once(env):
    adapter, handler, attach, connect = env
    fake = await attach("exec-0")
    outbox = adapter._conns["exec-0"].outbox
    before = outbox.frames_written
    told = Told()
    assert adapter.post_resume_result("exec-0", "c1", "r1", m.WAIT_IO, b"1", 0, told)
    adapter.flush_now("exec-0")
    assert outbox.frames_written == before + 1 and told.outcome == ("written",)   # synchronously
    adapter.flush_now("exec-9")                                                     # not attached: nothing
    (frame,) = await fake.wait_frames(m.RESUME_CALL)
    assert frame[0]["callId"] == "c1"


# ---- who may attach, and speak for which calls ----

@pytest.mark.parametrize("executor_id, secret, why", [
    ("exec-0", "", "without an attachSecret"),
    ("exec-0", "f" * 64, "wrong attachSecret"),
    ("exec-5", "f" * 64, "unknown id"),
])
async def test_an_attach_without_the_issued_secret_is_refused(env, executor_id, secret, why):
    adapter, handler, attach, connect = env
    adapter.credentials.issue("exec-0")
    forger = await connect(executor_id)
    forger.secret = secret
    forger.heartbeat()
    await forger.wait_eof()
    assert handler.attached == [] and adapter.executor_ids() == [] and adapter.attach_refused_total == 1
    assert forger.received == []                     # not even a HeartbeatAck
    real = await attach("exec-0")                     # the real one still attaches afterwards
    assert adapter.executor_ids() == ["exec-0"] and not real.eof


async def test_a_private_listener_attaches_only_its_own_executor(sock_dir):
    from blockx.adapters.executor.listener import private_socket_path
    path = os.path.join(sock_dir, "w.sock")
    adapter = ExecutorAdapter(path, private_executor_ids=["exec-0", "exec-1"])
    handler = adapter.handler = RecordingHandler()
    await adapter.start()
    own = private_socket_path(path, "exec-0")
    assert own == os.path.join(sock_dir, "w.exec-0.sock")
    assert stat.S_IMODE(os.stat(own).st_mode) == 0o600
    fakes = []
    try:
        # exec-1's valid secret, on exec-0's socket: refused.
        wrong = await FakeExecutor(own, "exec-1", secret=adapter.credentials.issue("exec-1")).connect()
        fakes.append(wrong)
        wrong.heartbeat()
        await wrong.wait_eof()
        assert handler.attached == [] and adapter.attach_refused_total == 1
        right = await FakeExecutor(own, "exec-0", secret=adapter.credentials.issue("exec-0")).connect()
        fakes.append(right)
        right.heartbeat()
        await handler.wait_attached("exec-0")
    finally:
        await adapter.close()
        for f in fakes:
            await f.close()
    assert not os.path.exists(own) and not os.path.exists(path)


async def test_frames_about_a_call_dispatched_to_another_connection_are_refused(env):
    adapter, handler, attach, connect = env
    victim = await attach("exec-0")
    forger = await attach("exec-1")
    adapter.bind("c1", "exec-0")
    adapter.send_execute_call("exec-0", "c1", execute_payload())
    adapter.bind("c2", "exec-1")                 # bound on the forger, not yet sent: not its either
    forger.send(forger.complete("c1"), m.call_failed("c1", "t1", 1, m.USER_ERROR, False, "forged"),
                m.call_waiting_io("c1", "r1", "t1", 1, "devstub", {"k": 1}), forger.complete("c2"),
                forger.complete("nope"))
    await wait_until(lambda: adapter.refused_frames_total == 5, what="five refused frames")
    assert handler.frames_of("exec-1") == [] and adapter.is_bound("c1", "exec-0")
    assert adapter.is_bound("c2", "exec-1") and adapter.executor_ids() == ["exec-0", "exec-1"]
    victim.send(victim.complete("c1"))
    (frame,) = await handler.wait_frames("exec-0")
    assert frame[0]["callId"] == "c1" and not adapter.is_bound("c1", "exec-0")


async def test_refused_attaches_and_frames_are_counted_on_metrics_by_reason(sock_dir, clock):
    import urllib.request

    from blockx.adapters.metrics import Metrics

    metrics = Metrics(process_metrics=False)
    adapter = ExecutorAdapter(os.path.join(sock_dir, "w.sock"), heartbeat_timeout_ms=10000, clock_ms=clock,
                              metrics=metrics)
    handler = adapter.handler = RecordingHandler()
    await adapter.start()
    port = metrics.start_http("127.0.0.1:0")
    fakes: list[FakeExecutor] = []

    async def heartbeat_from(executor_id: str, secret: str) -> FakeExecutor:
        fake = await FakeExecutor(adapter.socket_path, executor_id, secret=secret).connect()
        fakes.append(fake)
        fake.heartbeat()
        return fake

    try:
        live = await heartbeat_from("exec-0", adapter.credentials.issue("exec-0"))
        await handler.wait_attached("exec-0")
        await (await heartbeat_from("exec-0", adapter.credentials.issue("exec-0"))).wait_eof()  # taken
        await (await heartbeat_from("exec-7", "f" * 64)).wait_eof()                            # unknown id
        adapter.credentials.issue("exec-1")
        await (await heartbeat_from("exec-1", "f" * 64)).wait_eof()                            # wrong secret
        live.send(live.complete("not-dispatched"), live.complete("nor-this"))
        await wait_until(lambda: adapter.refused_frames_total == 2, what="two refused frames")
        text = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())
    finally:
        metrics.stop_http()
        await adapter.close()
        for fake in fakes:
            await fake.close()
    assert 'blockx_executor_attach_refused_total{reason="already_attached"} 1.0' in text
    assert 'blockx_executor_attach_refused_total{reason="credentials"} 2.0' in text
    assert 'reason="private_socket"' not in text                  # only the reasons that happened
    assert "blockx_executor_frames_refused_total 2.0" in text
    assert adapter.attach_refused_total == 3 and handler.attached == ["exec-0"]
