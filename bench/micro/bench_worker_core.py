"""WorkerCore: one task's whole life in the Sans-IO core, as the adapter
drives it: RequestTaskSlot -> SubmitTask -> activation prepared -> Builder,
Calls and Plugin phases finished -> terminal, with the periodic tick that purges
retained results. Time advances 1 ms per task.

"Compiled vs twin" here means the core with compiled hot paths vs the same
core under BLOCKX_NO_EXTENSIONS=1 (twin_env). WorkerCore itself uses no _fast
module today, so parity (~1.0x) is expected; the benchmark is there to show
the per-task cost of the core and to catch a hot path added to it later."""

from time import perf_counter

from bench.micro import register, sides

REQUIRES = ("blockx/core/worker/core.py",)


def setup():
    from blockx.core.config import Config
    from blockx.core.types import (FunctionCall, PhaseOutcome, SubmitTaskRequest, TaskPhase,
                                   TaskState)
    from blockx.core.worker.core import WorkerCore
    import blockx._fast as fast

    core = WorkerCore(Config(task_slots=64, result_retention_ms=1_000))
    fc = FunctionCall("callList", b'{"calls": [{"functionId": "add", "args": [1, 2]}]}')
    return {
        "core": core, "fc": fc, "now": [0], "seq": [0],
        "Submit": SubmitTaskRequest, "Outcome": PhaseOutcome, "Phase": TaskPhase,
        "SUCCEEDED": TaskState.SUCCEEDED,
        "builder": PhaseOutcome(calls=[{"functionId": "add", "args": [1, 2]}]),
        "calls": PhaseOutcome(outputs=[b"3"], call_count=1),
        "plugin": PhaseOutcome(),
        "twins": fast.NO_EXTENSIONS,
    }




def run(state, loops):
    core = state["core"]
    Submit, fc = state["Submit"], state["fc"]
    Phase = state["Phase"]
    BUILDER, CALLS, PLUGIN = Phase.BUILDER, Phase.CALLS, Phase.PLUGIN
    builder, calls, plugin = state["builder"], state["calls"], state["plugin"]
    request_slot = core.handle_request_task_slot
    submit = core.handle_submit_task
    prepared = core.handle_task_activation_prepared
    finished = core.handle_task_phase_finished
    tick = core.tick
    now = state["now"][0]
    seq = state["seq"][0]
    t0 = perf_counter()
    for _ in range(loops):
        now += 1
        seq += 1
        task_id = f"bench-{seq}"
        slot_id = request_slot(task_id, 5_000, now).snapshot.slot_id
        submit(Submit(task_id, slot_id, fc), now)
        prepared(task_id, slot_id, 1, now)
        finished(task_id, BUILDER, builder, now)
        finished(task_id, CALLS, calls, now)
        res = finished(task_id, PLUGIN, plugin, now)
        if (seq & 255) == 0:
            tick(now)
    elapsed = perf_counter() - t0
    if res.snapshot.state != state["SUCCEEDED"]:
        raise AssertionError(f"task did not succeed: {res.snapshot}")
    state["now"][0] = now
    state["seq"][0] = seq
    return elapsed


register("WorkerCore submit -> terminal", setup, *sides(run), twin_env=True, requires=REQUIRES,
         check=False)
