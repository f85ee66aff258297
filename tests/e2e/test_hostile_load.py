"""Hostile load against a real Worker over loopback: what a flood of refused
requests leaves in the Worker's memory, and what one identity flooding slots,
sessions and large call lists leaves to another.

Each test prints its figure (RSS before and after, the other identity's p50
against an idle Worker's); speed is never asserted, only that nothing is pinned
past the bound and that the other identity is served."""
from __future__ import annotations

import asyncio
import json
import queue
import statistics
import time

import grpc
import pytest

from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc
from tests.e2e.conftest import make_functions_dir
from tests.support import auth
from tests.support.session import call_list_task
from tests.support.worker import WorkerProcess

pytestmark = pytest.mark.e2e

MiB = 1024 * 1024
BIG = 8 * MiB
ALICE, BOB = "alice-token-0123456789abcdef", "bob-token-0123456789abcdef"
WRONG = "not-a-token-0123456789abcdef"
# The bound held: 300 refused 8 MiB requests leave the Worker within 100 MB of its RSS before.
REFUSED = 300
YEAR_MS = 365 * 24 * 3600 * 1000        # a task timeout past maxTaskTimeoutMs: INVALID_ARGUMENT
RSS_GROWTH_BOUND = 100 * MiB


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def settled_rss(pid: int, seconds: float = 3.0) -> int:
    """The Worker's RSS once the refused calls are behind it: the smallest of a few
    readings over ``seconds`` (what it still holds, not a transient peak)."""
    deadline = time.monotonic() + seconds
    best = rss_bytes(pid)
    while time.monotonic() < deadline:
        time.sleep(0.25)
        best = min(best, rss_bytes(pid))
    return best


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    """Token auth with alice, bob and admin (the harness); 4 slots, so a full Worker
    answers RESOURCE_EXHAUSTED."""
    d = tmp_path_factory.mktemp("hostile")
    tokens = auth.write_tokens(d, {"alice": ALICE, "bob": BOB, "admin": auth.HARNESS_TOKEN})
    proc = WorkerProcess({"WORKER_AUTH_TOKENS_FILE": tokens, "TASK_SLOTS": "4", "RESULT_RETENTION_MS": "60000",
                          "MAX_SLOT_TTL_MS": "600000"},
                         functions_dir=make_functions_dir(d))
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _big_submit(task_id: str, timeout_ms: int = 0) -> pb.SubmitTaskRequest:
    return pb.SubmitTaskRequest(task=pb.Task(task_id=task_id, task_timeout_ms=timeout_ms,
                                             function_call=pb.FunctionCallConfig(type="callList",
                                                                                 payload=b"x" * BIG)))


async def _refused(port: int, n: int, token: str | None, request, method: str, want: grpc.StatusCode,
                   concurrency: int = 4) -> None:
    """``n`` calls of ``method`` with ``request``, ``concurrency`` at a time, each refused with ``want``."""
    md = auth.metadata(token) if token else None
    opts = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1),
            ("grpc.use_local_subchannel_pool", 1)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=opts) as ch:
        stub = pb_grpc.WorkerServiceStub(ch)
        call = getattr(stub, method)
        sem = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with sem:
                with pytest.raises(grpc.aio.AioRpcError) as ei:
                    c = call(request, metadata=md, timeout=60)
                    if isinstance(c, grpc.aio.UnaryStreamCall):
                        async for _ in c:
                            pass
                    else:
                        await c
                assert ei.value.code() == want, (method, ei.value.code(), ei.value.details())
        await asyncio.gather(*(one() for _ in range(n)))


def test_refused_8_mib_requests_leave_the_worker_within_100_mb(w):
    # Fill the 4 slots with long reservations: an authenticated SubmitTask is then NoSlot.
    for i in range(4):
        w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id=f"hold-{i}", ttl_ms=600_000), timeout=10)
    pid = w.proc.pid
    before = settled_rss(pid, 1.0)
    t0 = time.monotonic()
    u = grpc.StatusCode.UNAUTHENTICATED
    per = REFUSED // 6
    submit = _big_submit("big")       # one message of each kind, sent many times (the client's cost is not measured)
    floods = [
        ("no token, SubmitTask", None, submit, "SubmitTask", u),
        ("no token, GetTaskResult", None, pb.GetTaskResultRequest(task_id="r" * BIG), "GetTaskResult", u),
        ("wrong token, SubmitTask", WRONG, submit, "SubmitTask", u),
        ("no token, WatchTasks", None, pb.WatchTasksRequest(task_ids=["w" * BIG]), "WatchTasks", u),
        # Authenticated, and refused for what the request holds or because the Worker is full.
        ("INVALID_ARGUMENT SubmitTask", ALICE, _big_submit("big", timeout_ms=YEAR_MS), "SubmitTask",
         grpc.StatusCode.INVALID_ARGUMENT),
        ("RESOURCE_EXHAUSTED SubmitTask", ALICE, submit, "SubmitTask", grpc.StatusCode.RESOURCE_EXHAUSTED),
    ]
    for what, token, request, method, want in floods:
        t1 = time.monotonic()
        asyncio.run(_refused(w.port, per, token, request, method, want))
        print(f"\n  {per} x {what}: {time.monotonic() - t1:.1f}s, worker RSS {rss_bytes(pid) / MiB:.0f} MB", end="")
    took = time.monotonic() - t0
    peak = rss_bytes(pid)
    after = settled_rss(pid)
    print(f"\nhostile load: {6 * per} refused 8 MiB requests in {took:.1f}s; worker RSS "
          f"{before / MiB:.0f} MB before, {peak / MiB:.0f} MB at the end, {after / MiB:.0f} MB 3 s later "
          f"(+{(after - before) / MiB:.0f} MB)")
    assert after - before <= RSS_GROWTH_BOUND, (
        f"{6 * per} refused 8 MiB requests grew the worker by {(after - before) / MiB:.0f} MB "
        f"({before / MiB:.0f} -> {after / MiB:.0f} MB), over {RSS_GROWTH_BOUND / MiB:.0f} MB")
    # And it still serves: a normal task of an identity runs.
    for i in range(4):
        w.stub.CancelTask(pb.CancelTaskRequest(task_id=f"hold-{i}"), timeout=10)
    w.submit_calls("after-flood", [("add", [2, 3])])
    assert w.wait_terminal("after-flood").state == pb.TASK_STATE_SUCCEEDED


# ---- fair shares: one identity floods, another keeps its share -----------------------------------

SHARE_ENV = {"TASK_SLOTS": "8",                          # a share of 4 slots per identity (half)
             "MAX_TASK_SESSIONS_PER_IDENTITY": "3", "MAX_WATCH_STREAMS_PER_IDENTITY": "6",
             "MAX_PAYLOAD_BYTES": str(2 * MiB), "MAX_QUEUED_CALL_BYTES_PER_IDENTITY": str(2 * MiB),
             "RESULT_RETENTION_MS": "60000", "CALL_DEADLINE_MS": "60000"}
CALLS_1_MIB = 25_000       # {"functionId": "sleep_ms", "args": [200]} x 25k: 1 MiB, running while the test lasts


def _stub(w, token):
    ch = auth.channel(f"127.0.0.1:{w.port}", token=token)
    return ch, pb_grpc.WorkerServiceStub(ch)


def _latencies(w, token: str, prefix: str, n: int) -> list[float]:
    """``n`` small tasks of ``token``'s identity one after the other: each must succeed;
    the seconds from SubmitTask to its terminal update."""
    ch, st = _stub(w, token)
    out = []
    try:
        for i in range(n):
            tid = f"{prefix}-{i}"
            t0 = time.monotonic()
            st.SubmitTask(pb.SubmitTaskRequest(task=call_list_task(tid, [("add", [i, 1])])), timeout=30)
            for upd in st.WatchTasks(pb.WatchTasksRequest(task_ids=[tid]), timeout=60):
                if upd.is_terminal:
                    assert upd.result.state == pb.TASK_STATE_SUCCEEDED, upd.result
                    break
            out.append(time.monotonic() - t0)
    finally:
        ch.close()
    return out


def _refusal(fn, *args, **kw) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as ei:
        r = fn(*args, **kw)
        if hasattr(r, "__iter__") and not hasattr(r, "DESCRIPTOR"):
            next(iter(r))
    return ei.value


def test_one_identity_flooding_slots_sessions_and_call_lists_leaves_another_its_share(tmp_path):
    tokens = auth.write_tokens(tmp_path, {"alice": ALICE, "bob": BOB, "admin": auth.HARNESS_TOKEN})
    w = WorkerProcess({"WORKER_AUTH_TOKENS_FILE": tokens, **SHARE_ENV}, functions_dir=make_functions_dir(tmp_path))
    w.start()
    held = []
    try:
        idle = _latencies(w, BOB, "idle", 10)
        ch, alice = _stub(w, ALICE)
        held.append(ch)
        # Slots: alice reserves what she can; past her share of 4 she is refused, naming the setting.
        granted = refused = 0
        for i in range(8):
            try:
                alice.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id=f"a-hold-{i}", ttl_ms=600_000), timeout=10)
                granted += 1
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "maxSlotsPerIdentity" in exc.details()
                refused += 1
        assert (granted, refused) == (4, 4)
        # Large call lists into two of her slots: the second passes her share of queued call bytes.
        payload = json.dumps({"calls": [{"functionId": "sleep_ms", "args": [200]}] * CALLS_1_MIB}).encode()
        big = lambda tid, slot: pb.SubmitTaskRequest(slot_id=slot, task=pb.Task(  # noqa: E731
            task_id=tid, function_call=pb.FunctionCallConfig(type="callList", payload=payload)))
        slots = [alice.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id=f"a-hold-{i}"), timeout=10).slot_id
                 for i in range(2)]
        alice.SubmitTask(big("a-hold-0", slots[0]), timeout=30)
        err = _refusal(alice.SubmitTask, big("a-hold-1", slots[1]), timeout=30)
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "maxQueuedCallBytesPerIdentity" in err.details()
        # Sessions that never read, and watch streams left open, up to her shares.
        sessions, quiet = [], queue.Queue()                  # requests that never come: the sessions stay open
        for i in range(3):
            c = grpc.insecure_channel(f"127.0.0.1:{w.port}")
            held.append(c)
            call = pb_grpc.WorkerServiceStub(c).TaskSession(iter(quiet.get, None), metadata=auth.metadata(ALICE),
                                                            timeout=120)
            sessions.append(call)
            call.initial_metadata()                          # accepted
        err = _refusal(alice.TaskSession, iter(quiet.get, None), timeout=10)
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "maxTaskSessionsPerIdentity" in err.details()
        watches = [alice.WatchTasks(pb.WatchTasksRequest(task_ids=[f"a-hold-{i % 3 + 1}"]), timeout=120)
                   for i in range(6)]                    # her reservations: they stay open
        for wt in watches:
            next(wt)                                         # each open, its first update read
        err = _refusal(alice.WatchTasks, pb.WatchTasksRequest(task_ids=["a-hold-2"]), timeout=10)
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "maxWatchStreamsPerIdentity" in err.details()
        # Bob, meanwhile: his tasks run, none refused, and his own streams open.
        flooded = _latencies(w, BOB, "flooded", 10)
        ch_b, bob = _stub(w, BOB)
        held.append(ch_b)
        bob_watch = bob.WatchTasks(pb.WatchTasksRequest(task_ids=["flooded-0"]), timeout=10)
        assert next(bob_watch).is_terminal
        print(f"\nfair shares: bob's task p50 {statistics.median(idle) * 1000:.1f} ms on an idle worker, "
              f"{statistics.median(flooded) * 1000:.1f} ms while alice holds her share of slots (4 of 8, one "
              f"running a {len(payload) / MiB:.1f} MiB call list), 3 unread sessions and 6 watch streams")
        metrics = w.metrics_text()
        assert 'blockx_identity_slots{identity="alice"} 4.0' in metrics
        assert 'blockx_share_refusals_total{identity="alice",share="slots"} 4.0' in metrics
        assert 'blockx_identity_streams{identity="alice",kind="TaskSession"} 3.0' in metrics
        alice.CancelTask(pb.CancelTaskRequest(task_id="a-hold-0"), timeout=10)
        for call in sessions:
            call.cancel()
        for _ in range(4):
            quiet.put(None)
        for wt in watches:
            wt.cancel()
    finally:
        for c in held:
            c.close()
        w.stop()


def test_past_the_memory_budget_new_work_is_refused_and_reads_still_answer(start_worker):
    w = start_worker({"WORKER_MEMORY_BUDGET_BYTES": str(16 * MiB)})     # below any Worker's RSS
    err = _refusal(w.stub.SubmitTask, pb.SubmitTaskRequest(task=call_list_task("over", [("add", [1, 2])])),
                   timeout=10)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err
    assert "over its memory budget" in err.details() and "memoryBudgetBytes, WORKER_MEMORY_BUDGET_BYTES" in err.details()
    err = _refusal(w.stub.RequestTaskSlot, pb.RequestTaskSlotRequest(task_id="over"), timeout=10)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "memoryBudgetBytes" in err.details()
    err = _refusal(w.stub.TaskSession, iter(()), timeout=10)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "memoryBudgetBytes" in err.details()
    # Reads are answered: the budget stops new work, not the Worker.
    err = _refusal(w.stub.GetTaskResult, pb.GetTaskResultRequest(task_id="over"), timeout=10)
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert w.stub.ListTasks(pb.ListTasksRequest(), timeout=10) is not None
    assert "blockx_memory_budget_bytes 1.6777216e+07" in w.metrics_text()
