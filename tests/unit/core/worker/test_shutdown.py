"""WorkerCore at shutdown: the heartbeat of a draining worker, and the tasks
still running when the drain ends."""
from blockx.core import failure_codes as fcodes
from blockx.core.types import ConvergeTask, PhaseOutcome, TaskPhase, TaskState

from tests.unit.core.worker.test_support import check_invariants, make, run_to, submit


def test_a_draining_worker_is_not_ready_in_its_heartbeat():
    w = make()
    w.set_ready(True)
    hb = w.derive_heartbeat(5)
    assert (hb["ready"], hb["draining"]) == (True, False)
    w.set_draining(True)
    hb = w.derive_heartbeat(6)
    assert (hb["ready"], hb["draining"]) == (False, True)
    assert w.ready          # the latch itself stays: executors came up once


def test_a_worker_that_never_became_ready_stays_not_ready_while_draining():
    w = make()
    w.set_draining(True)
    assert w.derive_heartbeat(0)["ready"] is False


def test_shutdown_converges_every_task_still_running_failed_and_retryable():
    w = make(task_slots=4)
    submit(w, "queued", 10)                   # accepted, never activated
    submit(w, "building", 10)
    run_to(w, "building", TaskPhase.BUILDER, 20)
    submit(w, "calling", 10)
    run_to(w, "calling", TaskPhase.CALLS, 30)
    w.set_draining(True)                      # phase 1 refused new work; its timeout passed
    cmds = w.handle_shutdown(1_000)
    check_invariants(w)
    assert [type(c) for c in cmds] == [ConvergeTask] * 3
    assert sorted(c.task_id for c in cmds) == ["building", "calling", "queued"]
    for c in cmds:
        assert c.state is TaskState.FAILED
        assert c.result.failure_code == fcodes.WORKER_SHUTDOWN == "WORKER_SHUTDOWN"
        assert c.result.retryable is True
        assert c.result.failure_message == ("the worker shut down before the task finished "
                                            "(drain timeout or a second signal); resubmit it "
                                            "to another worker")
        assert c.result.statistic.finished_at_ms == 1_000
    assert w.active_task_count() == 0 and w.free_capacity() == 4
    for tid in ("queued", "building", "calling"):
        assert w.get_index_entry(tid).state is TaskState.FAILED   # retained for GetTaskResult
    assert w.handle_shutdown(2_000) == []      # nothing left: a second call changes nothing


def test_shutdown_leaves_reservations_and_terminal_results_alone():
    w = make(task_slots=3)
    w.handle_request_task_slot("reserved", 60_000, 0)
    submit(w, "done", 0)
    run_to(w, "done", TaskPhase.PLUGIN, 1)
    w.handle_task_phase_finished("done", TaskPhase.PLUGIN, PhaseOutcome(), 2)
    assert w.handle_shutdown(10) == []
    assert w.get_index_entry("done").state is TaskState.SUCCEEDED
    assert w.get_index_entry("reserved").state is TaskState.ALLOCATED
    check_invariants(w)
    assert fcodes.is_retryable(fcodes.WORKER_SHUTDOWN) and fcodes.WORKER_SHUTDOWN in fcodes.ALL
