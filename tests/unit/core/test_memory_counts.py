"""The counts the memory diagnostics log line reads from the cores: retained
results (WorkerCore) and calls queued for an executor (DispatcherCore). Virtual clock, exact instants."""
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.types import TaskPhase

from tests.unit.core.dispatch.harness import Harness, spec

from tests.unit.core.worker.test_support import finish, make, run_to, submit


def test_retained_results_count_terminal_results_until_they_are_purged():
    w = make(task_slots=4, result_retention_ms=1000)
    w.handle_request_task_slot("reserved-only", 0, 0)     # a reservation is not a result
    for t in ("a", "b", "c"):
        submit(w, t, 0)
    assert w.retained_result_count() == 0
    for t, now in (("a", 10), ("b", 500)):
        run_to(w, t, TaskPhase.PLUGIN, now)
        finish(w, t, TaskPhase.PLUGIN, now)
    assert w.retained_result_count() == 2                  # "c" still runs
    w.purge_expired_results(1009)
    assert w.retained_result_count() == 2
    w.purge_expired_results(1010)                           # a's retention ends at 10 + 1000
    assert w.retained_result_count() == 1
    w.purge_expired_results(1500)
    assert w.retained_result_count() == 0


def test_queued_calls_are_the_ready_roots_across_tasks():
    h = Harness(DispatcherConfig(task_max_inflight_calls=2), executors=())
    h.submit("t1", [spec("f", i) for i in range(5)])
    h.submit("t2", [spec("g", i) for i in range(3)])
    assert h.core.queued_call_count == 8                    # no executor: every root waits
    h.set_executor("e1", usable_contexts=100)
    assert len(h.live) == 4                                  # two per task (the task window)
    assert h.core.queued_call_count == 4
    h.complete("t2/0")
    assert h.core.queued_call_count == 3
