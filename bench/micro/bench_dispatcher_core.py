"""DispatcherCore: one call's way through the Sans-IO scheduler, as the adapter
drives it, measured per call over tasks of 16 distinct calls on a pool of 8
executors: prepare + commit the call phase (packing it into the compact queue),
dispatch (the call's context, id and cache key made at admission, cache
key lookups, executor scoring, BindCall), executor bound (DispatchCallCmd),
call completed (UnbindCall, CallCache, singleflight), the epilogue that
converges the task, and remove_task.

"Compiled vs twin" means the core with the compiled hot paths (records, lifecycle,
fairness, subcalls, commands:
per-call state, admission, bound, completion, terminal accounting and the task
scheduler; readyqueue, scoring, cachekey) vs the same core under
BLOCKX_NO_EXTENSIONS=1 (twin_env)."""

from time import perf_counter

from bench.micro import register, sides

REQUIRES = ("blockx/core/dispatch/dispatcher.py", "blockx/core/dispatch/lifecycle.py")
CALLS = 16
EXECUTORS = 8
HEARTBEAT_MS = 1000       # one loop is one ms of the dispatcher's clock
DIGEST = "3f0a5c1e9b7d2a4c6e8f01234567890abcdef0123456789abcdef0123456789a"


def setup():
    import blockx._fast as fast
    from blockx.core.dispatch.dispatcher import DispatcherCore
    from blockx.core.dispatch.commands import BindCall, ConvergeTaskCalls
    from blockx.core.dispatch.config import DispatcherConfig
    from blockx.core.dispatch.types import PinnedCall, ExecutorSnapshot

    core = DispatcherCore(DispatcherConfig(), lambda: 0.5)
    snaps = [ExecutorSnapshot(f"exec-{i}", True, 0, 64) for i in range(EXECUTORS)]
    core.lifecycle.handle_executor_snapshot_updated(snaps, 0)
    calls = [PinnedCall("transfer_summary", DIGEST, b'["0xabc%d",%d]' % (i, i)) for i in range(CALLS)]
    return {"core": core, "calls": calls, "seq": [0], "Bind": BindCall,
            "Converge": ConvergeTaskCalls, "twins": fast.NO_EXTENSIONS, "Snapshot": ExecutorSnapshot}




def run(state, loops):
    core = state["core"]
    calls = state["calls"]
    Bind, Converge = state["Bind"], state["Converge"]
    prepare, commit = core.intake.prepare_call_phase, core.intake.commit_call_phase
    epilogue, bound = core.lifecycle.epilogue, core.lifecycle.handle_executor_bound
    completed, remove = core.lifecycle.handle_call_completed, core.lifecycle.remove_task
    snapshot, Snapshot = core.lifecycle.handle_executor_snapshot_updated, state["Snapshot"]
    seq = state["seq"][0]
    now = seq
    converged = 0
    t0 = perf_counter()
    for _ in range(loops):
        seq += 1
        now += 1
        if now % HEARTBEAT_MS == 0:      # the executors' heartbeats: their schedulers are alive, not stalled
            snapshot([Snapshot(f"exec-{i}", True, 0, 64, last_scheduler_active_at_ms=now, heartbeat_seq=now)
                      for i in range(EXECUTORS)], now)
        task_id = f"task-{seq}"
        commit(prepare(task_id, calls), now)
        binds = [c for c in epilogue(now) if type(c) is Bind]
        for b in binds:
            bound(b.call_id, now)
        for b in binds:
            completed(b.call_id, 1, b"42", 1, now)
        for c in epilogue(now):
            if type(c) is Converge:
                converged += 1
        remove(task_id)
    elapsed = perf_counter() - t0
    if converged != loops or core.task_count != 0:
        raise AssertionError(f"{loops - converged} task(s) did not converge")
    state["seq"][0] = seq
    return elapsed / CALLS


register(f"DispatcherCore dispatch -> complete (per call, {CALLS}-call tasks)", setup, *sides(run),
         twin_env=True, requires=REQUIRES)
