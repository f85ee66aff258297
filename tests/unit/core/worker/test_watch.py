"""WorkerCore: Watch grace (watchDisconnectGraceMs). Virtual clock from 0."""
from blockx.core import failure_codes as fcodes
from blockx.core.types import PhaseOutcome, StartPluginPhase, TaskPhase, TaskState

from tests.unit.core.worker.test_support import activate, check_invariants, finish, make, run_to, submit

G = 1000


def watched(grace=G, phase=TaskPhase.BUILDER, **cfg):
    w = make(watch_disconnect_grace_ms=grace, **cfg)
    submit(w, "t", 0)
    run_to(w, "t", phase, 0)
    return w


def test_grace_zero_never_reclaims():
    w = watched(grace=0)
    assert w.handle_watch_attached("t", 1) and w.handle_watch_detached("t", 2)
    assert w.get_task_context("t").watch_disconnect_deadline_ms is None
    assert w.watch_disconnected_tasks(299_999) == []
    assert not w.handle_watch_disconnected("t", 299_999).applied


def test_last_detach_starts_grace_and_expiry_fails_the_task():
    w = watched()
    assert w.handle_watch_attached("t", 10)
    ctx = w.get_task_context("t")
    assert (ctx.watch_attached, ctx.watch_ever_attached) == (1, True)
    assert w.handle_watch_detached("t", 100)
    assert ctx.watch_attached == 0 and ctx.watch_disconnect_deadline_ms == 100 + G
    assert w.next_deadline() == 100 + G
    assert w.watch_disconnected_tasks(100 + G - 1) == []
    assert not w.handle_watch_disconnected("t", 100 + G - 1).applied
    assert w.watch_disconnected_tasks(100 + G) == ["t"]
    r = w.handle_watch_disconnected("t", 100 + G)
    check_invariants(w)
    cmd = r.commands[0]
    res = cmd.result
    assert (res.state, res.failure_code, res.retryable) == (TaskState.FAILED, fcodes.WATCH_DISCONNECTED, False)
    assert f"watchDisconnectGraceMs ({G} ms)" in res.failure_message
    assert cmd.interrupted_phase is TaskPhase.BUILDER
    assert w.free_capacity() == 50 and w.watch_disconnected_tasks(10**9) == []


def test_reattach_cancels_the_grace():
    w = watched()
    w.handle_watch_attached("t", 0)
    w.handle_watch_detached("t", 100)
    w.handle_watch_attached("t", 100 + G - 1)
    assert w.get_task_context("t").watch_disconnect_deadline_ms is None
    assert w.watch_disconnected_tasks(10 * G) == []
    assert not w.handle_watch_disconnected("t", 10 * G).applied
    assert w.next_deadline() == 300_000, "only the task deadline is left"


def test_grace_restarts_from_the_latest_last_detach():
    w = watched()
    w.handle_watch_attached("t", 0)
    w.handle_watch_detached("t", 100)          # grace until 1100
    w.handle_watch_attached("t", 500)
    w.handle_watch_detached("t", 600)          # grace until 1600
    assert w.watch_disconnected_tasks(1100) == []
    assert not w.handle_watch_disconnected("t", 1100).applied
    assert w.next_deadline() == 1600
    assert w.tick(1600)[0].result.failure_code == fcodes.WATCH_DISCONNECTED


def test_grace_starts_only_when_the_last_stream_leaves():
    w = watched()
    w.handle_watch_attached("t", 0)
    w.handle_watch_attached("t", 0)
    w.handle_watch_detached("t", 10)
    assert w.get_task_context("t").watch_disconnect_deadline_ms is None
    w.handle_watch_detached("t", 20)
    assert w.get_task_context("t").watch_disconnect_deadline_ms == 20 + G


def test_unbalanced_detach_and_unknown_or_terminal_tasks_are_ignored():
    w = watched()
    assert not w.handle_watch_detached("t", 1), "never attached"
    assert w.get_task_context("t").watch_disconnect_deadline_ms is None
    assert not w.handle_watch_attached("nope", 1) and not w.handle_watch_detached("nope", 1)
    run_to(w, "t", TaskPhase.PLUGIN, 2)
    finish(w, "t", TaskPhase.PLUGIN, 2)
    assert not w.handle_watch_attached("t", 3) and not w.handle_watch_detached("t", 3)


def test_a_task_never_watched_is_never_reclaimed():
    w = watched()
    assert w.watch_disconnected_tasks(299_999) == []
    assert w.tick(299_999) == []


def test_watch_before_submit_carries_over_to_the_task():
    w = make(watch_disconnect_grace_ms=G)
    w.handle_request_task_slot("t", 0, 0)
    assert w.handle_watch_attached("t", 1)
    submit(w, "t", 2, "slot-0")
    ctx = w.get_task_context("t")
    assert (ctx.watch_attached, ctx.watch_ever_attached) == (1, True)
    activate(w, "t", 3)
    w.handle_watch_detached("t", 4)
    assert w.watch_disconnected_tasks(4 + G) == ["t"]


def test_detach_of_a_bare_reservation_arms_no_grace():
    w = make(watch_disconnect_grace_ms=G)
    w.handle_request_task_slot("t", 0, 0)
    w.handle_watch_attached("t", 1)
    w.handle_watch_detached("t", 2)
    assert w.watch_disconnected_tasks(10**6) == [] and w.next_deadline() == 5000


def test_grace_expiry_wins_over_a_later_phase_outcome():
    w = watched(phase=TaskPhase.CALLS)
    w.handle_watch_attached("t", 0)
    w.handle_watch_detached("t", 0)
    r = finish(w, "t", TaskPhase.CALLS, G, PhaseOutcome(outputs=[b"1"]))
    assert r.commands[0].result.failure_code == fcodes.WATCH_DISCONNECTED
    w = watched(phase=TaskPhase.CALLS)
    w.handle_watch_attached("t", 0)
    w.handle_watch_detached("t", 0)
    assert isinstance(finish(w, "t", TaskPhase.CALLS, G - 1).commands[0], StartPluginPhase)


def test_earlier_deadline_wins_over_watch_grace():
    w = make(watch_disconnect_grace_ms=G)
    submit(w, "t", 0, task_timeout_ms=500)
    run_to(w, "t", TaskPhase.BUILDER, 0)
    w.handle_watch_attached("t", 0)
    w.handle_watch_detached("t", 0)
    assert w.handle_watch_disconnected("t", G).commands[0].result.failure_code == fcodes.TIMED_OUT
