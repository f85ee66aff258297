"""ProgressTicker over the real cores (DispatcherCore, WorkerCore) and the real
SubscriptionManager: one timer only while something is watched, changed counts
only, the task's running state, nothing after the task ends, final counts on
the terminal snapshot."""
import asyncio

from blockx.adapters.grpc import wire
from blockx.adapters.progress_ticker import FinalSnapshot, ProgressTicker
from blockx.adapters.subscriptions import Subscription, SubscriptionManager
from blockx.core.types import TaskResult, TaskState, TaskStatistic
from blockx.worker.v1 import worker_pb2 as pb

from tests.unit.core.dispatch.harness import Harness, spec
from tests.unit.core.worker.test_support import make, submit

TICK = 0.02


def _setup():
    h = Harness(contexts=8)
    core = make(task_slots=4)
    submit(core, "t")                               # a submitted, running task in WorkerCore
    subs = SubscriptionManager(lambda tid: ticker.wake(), lambda tid, disc: None)
    ticker = ProgressTicker(disp=h.core, core=core, subscriptions=subs, interval_s=TICK)
    return h, core, subs, ticker


def _drain(q: asyncio.Queue) -> list:
    out = []
    while not q.empty():
        out.append(q.get_nowait())
    return out


async def test_no_timer_runs_while_nothing_is_watched():
    h, core, subs, ticker = _setup()
    h.submit("t", [spec("f", i) for i in range(3)])
    await asyncio.sleep(TICK * 4)
    assert ticker.ticks == 0 and not ticker.armed
    sub = subs.attach(["t"])
    assert ticker.armed
    await asyncio.sleep(TICK * 3)
    assert ticker.ticks >= 1
    subs.detach(sub, False)
    await asyncio.sleep(TICK * 2)
    ticks = ticker.ticks
    await asyncio.sleep(TICK * 4)
    assert ticker.ticks == ticks and not ticker.armed      # stopped once nobody watches


async def test_changed_progress_only_with_the_running_state():
    h, core, subs, ticker = _setup()
    h.submit("t", [spec("f", i) for i in range(3)])
    sub = subs.attach(["t"])
    await asyncio.sleep(TICK * 2.5)
    first = _drain(sub.queue)
    assert len(first) == 1                                 # (3, 0, 0, 0) once, not every tick
    u = first[0]
    assert type(u) is pb.TaskUpdate and u.state == pb.TASK_STATE_RUNNING and not u.is_terminal
    assert (u.progress.calls_total, u.progress.calls_done) == (3, 0)
    h.complete("t/0")
    await asyncio.sleep(TICK * 2.5)
    (u,) = _drain(sub.queue)
    assert (u.progress.calls_total, u.progress.calls_done) == (3, 1)
    # The task ends: its final counts are captured, and no tick publishes it again.
    h.complete("t/1")
    final = ticker.final("t")
    assert final == (3, 2, 0, 0)
    h.run(h.core.lifecycle.remove_task("t"))
    await asyncio.sleep(TICK * 3)
    assert _drain(sub.queue) == []
    subs.detach(sub, False)
    ticker.close()


async def test_a_task_workercore_does_not_run_gets_no_progress():
    h, core, subs, ticker = _setup()
    h.submit("u", [spec("f", 1)])                          # the dispatcher holds it, WorkerCore does not
    sub = subs.attach(["u"])
    await asyncio.sleep(TICK * 3)
    assert _drain(sub.queue) == []
    subs.detach(sub, False)
    ticker.close()


async def test_encoder_attaches_live_final_and_retained_counts():
    h, core, subs, ticker = _setup()
    enc = wire.TaskUpdateEncoder(ticker.progress_of)
    h.submit("t", [spec("f", 1), spec("f", 2)])
    h.complete("t/0")
    live = enc(core.handle_get_task_result("t").snapshot)
    assert (live.progress.calls_total, live.progress.calls_done) == (2, 1)
    stat = TaskStatistic(0, 5, 0, 5, 0, call_count=2, calls_failed=1, call_retries=3)
    result = TaskResult(TaskState.FAILED, "CALL_FAILED", "x", False, [], [], stat)
    fin = enc(FinalSnapshot("t", "slot-0", TaskState.FAILED, result, (2, 1, 1, 3)))
    assert fin.is_terminal and (fin.progress.calls_done, fin.progress.calls_retried) == (1, 3)
    # A retained result read later: the statistic's counts (the Calls phase reported).
    from blockx.core.types import TaskSnapshot
    kept = enc(TaskSnapshot("t", "slot-0", TaskState.FAILED, result))
    p = kept.progress
    assert (p.calls_total, p.calls_done, p.calls_failed, p.calls_retried) == (2, 2, 1, 3)
    # A running task the dispatcher does not hold yet (before its Calls phase) carries none.
    submit(core, "v")
    assert not enc(core.handle_get_task_result("v").snapshot).HasField("progress")
    ticker.close()
