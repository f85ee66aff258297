"""The terminal result of a converging task.

Rules: a result is built once, in the call that makes the task terminal, from
what the context recorded: the outputs and call counters of the Calls phase,
the plugin results of the Plugin phase, and the time each phase ran. A phase
cut short (timeout, lost slot, Watch grace) is charged with the time it ran up
to ``now``; a phase that reported its own outcome was charged when it did.
Outputs appear only when the Calls phase reported (in call-list order, as the
dispatcher delivered them); a writer that consumed them as the task ran reports
how many it wrote (outputs_written) with the plugin results. The traceback and
locals of the call that failed the task travel with the Calls phase's outcome
and are kept only while the task's failure message is that phase's own (a
later failure, say a timeout, is not explained by an earlier call's traceback).
"""
from __future__ import annotations

from blockx.core.types import TaskContext, TaskPhase, TaskResult, TaskState, TaskStatistic

_BUILDER = TaskPhase.BUILDER
_CALLS = TaskPhase.CALLS
_PLUGIN = TaskPhase.PLUGIN


def terminal_result(ctx: TaskContext, state: TaskState, code: str, message: str, retryable: bool,
                    now: int, phase_done: bool) -> TaskResult:
    if not phase_done:     # charge the interrupted phase with the time it ran
        phase = ctx.phase
        elapsed = now - ctx.phase_started_at_ms
        if phase is _BUILDER:
            ctx.builder_ms = elapsed
        elif phase is _CALLS:
            ctx.calls_ms = elapsed
        elif phase is _PLUGIN:
            ctx.plugin_ms = elapsed
    stat = TaskStatistic(ctx.accepted_at_ms, now, ctx.builder_ms, ctx.calls_ms, ctx.plugin_ms)
    calls = ctx.calls_outcome
    outputs: list[bytes] = []
    if calls is not None:
        outputs = calls.outputs
        stat.call_count = calls.call_count
        stat.calls_failed = calls.calls_failed
        stat.call_retries = calls.call_retries
        stat.cache_hits = calls.cache_hits
    plugin = ctx.plugin_outcome
    if plugin is None:
        res = TaskResult(state, code, message, retryable, outputs, [], stat)
    else:
        res = TaskResult(state, code, message, retryable, outputs, plugin.plugin_results, stat,
                         plugin.outputs_written)
    if calls is not None and calls.failure_call_id and message == calls.failure_message:
        res.failure_call_id = calls.failure_call_id
        res.failure_traceback = calls.failure_traceback
        res.failure_locals = calls.failure_locals
    return res
