"""WorkerCore.list_tasks: the rows, the filters, ownership and pagination."""
import pytest

from blockx.core.errors import InvalidArgumentError
from blockx.core.owners import Caller
from blockx.core.types import PhaseOutcome, TaskPhase, TaskState
from blockx.core.worker.listing import MAX_PAGE_SIZE, TaskListFilter, decode_token

from tests.unit.core.worker.test_support import check_invariants, make, req, run_to

ALICE = Caller("alice")
BOB = Caller("bob")
ADMIN = Caller("admin", admin=True)


def _fleet():
    """Six tasks, one in each listed phase, owned by alice (a*) or bob (b*)."""
    w = make(task_slots=8, result_retention_ms=60_000)
    w.handle_request_task_slot("a-reserved", 60_000, 5, ALICE)
    w.handle_submit_task(req("a-preparing", instance_id="i1"), 10, ALICE)
    w.handle_submit_task(req("b-builder", instance_id="i2"), 20, BOB)
    run_to(w, "b-builder", TaskPhase.BUILDER, 21)
    w.handle_submit_task(req("a-calls", instance_id="i1"), 30, ALICE)
    run_to(w, "a-calls", TaskPhase.CALLS, 31)
    w.handle_submit_task(req("b-plugin", instance_id="i2"), 40, BOB)
    w.handle_task_activation_prepared("b-plugin", w.get_task_context("b-plugin").slot_id, 1, 41)
    w.handle_task_phase_finished("b-plugin", TaskPhase.BUILDER, PhaseOutcome(calls=[]), 42)
    w.handle_task_phase_finished("b-plugin", TaskPhase.CALLS, PhaseOutcome(call_count=3), 43)
    w.handle_submit_task(req("a-done", instance_id="i1"), 50, ALICE)
    run_to(w, "a-done", TaskPhase.CALLS, 51)
    w.handle_task_phase_finished("a-done", TaskPhase.CALLS, PhaseOutcome(call_count=2, calls_failed=1), 52)
    w.handle_task_phase_finished("a-done", TaskPhase.PLUGIN, PhaseOutcome.failure("PLUGIN_FAILED", "no"), 53)
    w.handle_request_task_slot("lapsed", 10, 0, ALICE)
    w.tick(100)                                    # a tombstone: never listed
    check_invariants(w)
    return w


def _ids(page):
    return [t.task_id for t in page.tasks]


def test_rows_carry_state_phase_owner_age_and_the_calls_the_core_knows():
    w = _fleet()
    page = w.list_tasks(TaskListFilter(), 1_000)
    rows = {t.task_id: t for t in page.tasks}
    assert _ids(page) == ["a-calls", "a-done", "a-preparing", "a-reserved", "b-builder", "b-plugin"]
    assert page.next_page_token == ""
    got = {tid: (r.state, r.phase, r.owner, r.instance_id, r.created_at_ms, r.age_ms, r.finished_at_ms,
                 r.failure_code, r.calls_total, r.calls_done) for tid, r in rows.items()}
    assert got == {
        "a-reserved": (TaskState.ALLOCATED, "RESERVED", "alice", "", 5, 995, 0, "", 0, 0),
        "a-preparing": (TaskState.RUNNING, "PREPARING", "alice", "i1", 10, 990, 0, "", 0, 0),
        "b-builder": (TaskState.RUNNING, "BUILDER", "bob", "i2", 20, 980, 0, "", 0, 0),
        "a-calls": (TaskState.RUNNING, "CALLS", "alice", "i1", 30, 970, 0, "", None, None),
        "b-plugin": (TaskState.RUNNING, "PLUGIN", "bob", "i2", 40, 960, 0, "", 3, 3),
        "a-done": (TaskState.FAILED, "TERMINAL", "alice", "i1", 50, 950, 53, "PLUGIN_FAILED", 2, 2),
    }
    assert rows["a-calls"].slot_id.startswith("slot-")


def test_a_caller_sees_only_its_own_tasks_and_an_admin_every_task():
    w = _fleet()
    assert _ids(w.list_tasks(TaskListFilter(), 1, ALICE)) == ["a-calls", "a-done", "a-preparing", "a-reserved"]
    assert _ids(w.list_tasks(TaskListFilter(), 1, BOB)) == ["b-builder", "b-plugin"]
    assert len(w.list_tasks(TaskListFilter(), 1, ADMIN).tasks) == 6
    assert w.list_tasks(TaskListFilter(), 1, Caller("carol")).tasks == []


def test_filters_by_state_phase_and_instance_combine():
    w = _fleet()
    q = lambda **kw: _ids(w.list_tasks(TaskListFilter(**kw), 1))  # noqa: E731
    assert q(states=(TaskState.RUNNING,)) == ["a-calls", "a-preparing", "b-builder", "b-plugin"]
    assert q(states=(TaskState.FAILED, TaskState.ALLOCATED)) == ["a-done", "a-reserved"]
    assert q(phases=("CALLS", "PLUGIN")) == ["a-calls", "b-plugin"]
    assert q(phases=("TERMINAL",)) == ["a-done"]
    assert q(instance_id="i2") == ["b-builder", "b-plugin"]
    assert q(instance_id="i1", states=(TaskState.RUNNING,), phases=("CALLS",)) == ["a-calls"]
    assert q(instance_id="nobody") == []


def test_pages_walk_every_task_once_in_id_order():
    w = make(task_slots=30)
    for i in range(25):
        w.handle_submit_task(req(f"t{i:02d}"), i)
    seen, token, pages = [], "", 0
    while True:
        page = w.list_tasks(TaskListFilter(page_size=10, page_token=token), 100)
        seen += _ids(page)
        pages += 1
        token = page.next_page_token
        if not token:
            break
        if pages == 1:      # a task that arrives before the cursor is not seen; one after it is
            w.handle_submit_task(req("t05x"), 100)
            w.handle_submit_task(req("t25y"), 100)
    assert pages == 3
    assert seen == sorted(seen) and len(seen) == len(set(seen))
    assert seen[:10] == [f"t{i:02d}" for i in range(10)]
    assert "t25y" in seen and "t05x" not in seen
    assert len(seen) == 26


def test_page_size_defaults_and_caps_and_bad_input_is_refused():
    w = make(task_slots=2)
    w.handle_submit_task(req("x"), 0)
    assert len(w.list_tasks(TaskListFilter(page_size=10 ** 9), 0).tasks) == 1      # served as MAX_PAGE_SIZE
    with pytest.raises(InvalidArgumentError, match=f"page_size is -1.*at most {MAX_PAGE_SIZE}"):
        w.list_tasks(TaskListFilter(page_size=-1), 0)
    with pytest.raises(InvalidArgumentError, match="phases holds 'RUNNING', which is no phase"):
        w.list_tasks(TaskListFilter(phases=("RUNNING",)), 0)
    for token in ("garbage!", "YWZ0ZXI6", "x" * 2000):
        with pytest.raises(InvalidArgumentError, match="page_token is not a token this worker issued"):
            w.list_tasks(TaskListFilter(page_token=token), 0)


def test_max_page_size_is_served_at_most():
    w = make(task_slots=MAX_PAGE_SIZE + 5)
    for i in range(MAX_PAGE_SIZE + 5):
        w.handle_submit_task(req(f"t{i:05d}"), 0)
    page = w.list_tasks(TaskListFilter(page_size=MAX_PAGE_SIZE + 5), 0)
    assert len(page.tasks) == MAX_PAGE_SIZE
    assert decode_token(page.next_page_token) == f"t{MAX_PAGE_SIZE - 1:05d}"
    rest = w.list_tasks(TaskListFilter(page_size=MAX_PAGE_SIZE, page_token=page.next_page_token), 0)
    assert len(rest.tasks) == 5 and rest.next_page_token == ""
