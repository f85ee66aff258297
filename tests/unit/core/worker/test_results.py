"""core.worker.results.terminal_result: statistic, outputs and plugin results of a
converging task, and the charge of a phase cut short."""
from blockx.core.types import (CallRetryPolicy, FunctionCall, PhaseOutcome, PluginResult,
                               TaskContext, TaskPhase, TaskState, TaskStatistic)
from blockx.core.worker.results import terminal_result


def ctx(phase, started, accepted=10):
    c = TaskContext("t", "slot-0", 0, 10_000, accepted, FunctionCall("callList"), None,
                    "FAST_FAIL", CallRetryPolicy(3, 10, 5), "")
    c.phase, c.phase_started_at_ms = phase, started
    return c


def test_a_phase_cut_short_is_charged_up_to_now():
    c = ctx(TaskPhase.CALLS, started=25)
    c.builder_ms = 7
    r = terminal_result(c, TaskState.FAILED, "TIMED_OUT", "late", True, 100, False)
    assert r.statistic == TaskStatistic(10, 100, 7, 75, 0)
    assert (r.state, r.failure_code, r.failure_message, r.retryable) == (
        TaskState.FAILED, "TIMED_OUT", "late", True)
    assert r.outputs == [] and r.plugin_results == [], "the Calls phase never reported"
    assert c.calls_ms == 75


def test_a_phase_that_reported_keeps_its_own_charge():
    c = ctx(TaskPhase.PLUGIN, started=40)
    c.builder_ms, c.calls_ms, c.plugin_ms = 5, 20, 3
    c.calls_outcome = PhaseOutcome(outputs=[b"1", b"2"], call_count=3, calls_failed=1,
                                   call_retries=2, cache_hits=1)
    c.plugin_outcome = PhaseOutcome(plugin_results=[PluginResult("log", True)])
    r = terminal_result(c, TaskState.SUCCEEDED, "", "", False, 90, True)
    assert r.statistic == TaskStatistic(10, 90, 5, 20, 3, 3, 1, 2, 1)
    assert r.outputs == [b"1", b"2"] and r.plugin_results == [PluginResult("log", True)]


def test_preparing_is_charged_to_no_phase():
    c = ctx(TaskPhase.PREPARING, started=0)
    r = terminal_result(c, TaskState.FAILED, "SLOT_LOST", "", False, 300, False)
    assert r.statistic == TaskStatistic(10, 300, 0, 0, 0)
