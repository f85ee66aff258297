"""TaskScheduler: instance-level max-min fair admission (instance fairness), and
the fairness quantum (consecutive binds served to one instance)."""
import pytest

from blockx._fast import implementations

from blockx.core.dispatch.commands import BindCall
from blockx.core.dispatch.config import DispatcherConfig

from tests.unit.core.dispatch.harness import Harness, of_type, spec


def _queued(fair: bool, quantum: int = 0):
    h = Harness(DispatcherConfig(instance_fairness=fair, instance_fairness_quantum=quantum),
                executors=("e",), contexts=0)
    h.submit("a1", [spec("f", i) for i in range(6)], instance_id="A")
    h.submit("a2", [spec("g", i) for i in range(6)], instance_id="A")
    h.submit("b1", [spec("h", i) for i in range(6)], instance_id="B")
    return h


def _binds(h) -> list[str]:
    return [c.call_id for c in of_type(h.log, BindCall)]


def test_without_fairness_tasks_take_turns():
    h = _queued(False)
    h.set_executor("e", usable_contexts=6)
    assert _binds(h) == ["a1/0", "a2/0", "b1/0", "a1/1", "a2/1", "b1/1"]


def test_with_fairness_instances_take_turns_and_tasks_within_them():
    h = _queued(True)
    h.set_executor("e", usable_contexts=6)
    assert _binds(h) == ["a1/0", "b1/0", "a2/0", "b1/1", "a1/1", "b1/2"]
    assert h.core.scheduler.instance_inflight() == {"A": 3, "B": 3}


def test_the_least_served_instance_catches_up():
    h = Harness(DispatcherConfig(instance_fairness=True), executors=("e",), contexts=3)
    h.submit("a", [spec("f", i) for i in range(10)], instance_id="A")
    assert h.core.scheduler.instance_inflight() == {"A": 3}
    h.submit("b", [spec("g", i) for i in range(10)], instance_id="B")
    h.log.clear()
    h.set_executor("e", usable_contexts=7)
    # B had nothing in flight: it gets binds until it matches A, then they alternate.
    assert _binds(h) == ["b/0", "b/1", "b/2", "a/3"]
    h.log.clear()
    h.complete("b/0")
    h.complete("b/1")
    assert _binds(h) == ["b/3", "b/4"]


def test_completions_free_room_for_the_instance_with_fewer_inflight():
    h = Harness(DispatcherConfig(instance_fairness=True), executors=("e",), contexts=0)
    h.submit("a", [spec("f", i) for i in range(10)], instance_id="A")
    h.submit("b", [spec("g", i) for i in range(10)], instance_id="B")
    h.set_executor("e", usable_contexts=4)
    assert h.core.scheduler.instance_inflight() == {"A": 2, "B": 2}
    h.log.clear()
    h.complete("a/0")     # A: 1, B: 2 -> the free context goes to A
    assert _binds(h) == ["a/2"]
    h.complete("b/0")
    assert _binds(h) == ["a/2", "b/2"]


def test_an_instance_without_ready_work_does_not_block_others():
    h = Harness(DispatcherConfig(instance_fairness=True), executors=("e",), contexts=0)
    h.submit("a", [spec("f", 0)], instance_id="A")
    h.submit("b", [spec("g", i) for i in range(4)], instance_id="B")
    h.set_executor("e", usable_contexts=5)
    assert _binds(h) == ["a/0", "b/0", "b/1", "b/2", "b/3"]


def test_instances_are_forgotten_with_their_last_task():
    h = Harness(DispatcherConfig(instance_fairness=True))
    h.submit("a", [spec("f", 0)], instance_id="A")
    h.submit("b", [spec("g", 0)], instance_id="B")
    h.complete("a/0")
    h.core.lifecycle.remove_task("a")
    assert h.core.scheduler.instance_inflight() == {"B": 1}
    h.core.lifecycle.cancel_task("b", "bye", h.now)
    assert h.core.scheduler.instance_inflight() == {}


def test_empty_instance_id_is_its_own_instance():
    h = Harness(DispatcherConfig(instance_fairness=True), executors=("e",), contexts=0)
    h.submit("x", [spec("f", i) for i in range(3)])
    h.submit("y", [spec("g", i) for i in range(3)], instance_id="Y")
    h.set_executor("e", usable_contexts=4)
    assert _binds(h) == ["x/0", "y/0", "x/1", "y/1"]


def _two_instances(quantum: int, calls: int = 12):
    h = Harness(DispatcherConfig(instance_fairness=True, instance_fairness_quantum=quantum),
                executors=("e",), contexts=0)
    h.submit("a", [spec("f", i) for i in range(calls)], instance_id="A")
    h.submit("b", [spec("g", i) for i in range(calls)], instance_id="B")
    return h


def _instances(h) -> str:
    return "".join(c.call_id[0].upper() for c in of_type(h.log, BindCall))


@pytest.mark.parametrize("quantum", [0, 1])
def test_zero_and_one_reselect_per_call(quantum):
    h = _two_instances(quantum)
    h.set_executor("e", usable_contexts=6)
    assert _instances(h) == "ABABAB"


def test_quantum_serves_consecutive_binds_to_one_instance():
    h = _two_instances(3)
    h.set_executor("e", usable_contexts=9)
    assert _instances(h) == "AAABBBAAA"


def test_quantum_carries_over_between_dispatch_rounds():
    h = _two_instances(3)
    h.set_executor("e", usable_contexts=2)
    assert _instances(h) == "AA"
    h.set_executor("e", usable_contexts=5)
    assert _instances(h) == "AAABB"


def test_an_instance_that_runs_dry_gives_up_the_rest_of_its_quantum():
    h = Harness(DispatcherConfig(instance_fairness=True, instance_fairness_quantum=4),
                executors=("e",), contexts=0)
    h.submit("a", [spec("f", i) for i in range(2)], instance_id="A")
    h.submit("b", [spec("g", i) for i in range(6)], instance_id="B")
    h.set_executor("e", usable_contexts=8)
    assert _instances(h) == "AABBBBBB"


def test_task_window_ends_an_instances_turn():
    h = Harness(DispatcherConfig(instance_fairness=True, instance_fairness_quantum=5,
                                 task_max_inflight_calls=2), executors=("e",), contexts=0)
    h.submit("a", [spec("f", i) for i in range(6)], instance_id="A")
    h.submit("b", [spec("g", i) for i in range(6)], instance_id="B")
    h.set_executor("e", usable_contexts=10)
    assert _instances(h) == "AABB"


def test_large_quantum_is_capped():
    cfg = DispatcherConfig(instance_fairness=True, instance_fairness_quantum=1024)
    assert cfg.validate().effective_fairness_quantum == 1024
    h = _two_instances(1024, calls=5)
    h.set_executor("e", usable_contexts=10)
    assert _instances(h) == "AAAAABBBBB"


@pytest.mark.parametrize("quantum", [1025, 5000])
def test_a_quantum_above_1024_is_capped_at_1024_not_refused(quantum):
    # The task window and the executor's in-flight cap are opened wide so that
    # only the quantum ends A's turn.
    cfg = DispatcherConfig(instance_fairness=True, instance_fairness_quantum=quantum,
                           task_max_inflight_calls=4096, executor_max_inflight=4096)
    assert cfg.validate().effective_fairness_quantum == 1024
    h = Harness(cfg, executors=("e",), contexts=0)
    h.submit("a", [spec("f", i) for i in range(1100)], instance_id="A")
    h.submit("b", [spec("g", i) for i in range(1100)], instance_id="B")
    h.set_executor("e", usable_contexts=1100)
    assert _instances(h) == "A" * 1024 + "B" * 76


def test_a_turn_that_served_nothing_is_void():
    h = Harness(DispatcherConfig(instance_fairness=True, instance_fairness_quantum=3),
                executors=("e",), contexts=3)
    h.submit("a", [spec("f", i) for i in range(12)], instance_id="A")
    h.submit("b", [spec("g", i) for i in range(12)], instance_id="B")
    h.set_executor("e", usable_contexts=6)
    # A filled the executor exactly at its quantum; the turn picked next found no
    # executor, so B (nothing in flight) goes first once room appears.
    assert _instances(h) == "AAABBB"


FORMS = list(zip(implementations("fairness", "blockx.core.dispatch"),
                 implementations("records", "blockx.core.dispatch")))


@pytest.mark.parametrize("form", FORMS, ids=[f[0][0] for f in FORMS])
def test_the_scheduler_takes_turns_like_the_twin(form):
    """One fair scheduler per implementation, the same operations, the same picks."""
    from blockx._fast import load
    ReadyQueue = load("readyqueue").ReadyQueue
    picks = []
    for (_, fair), (_, rec) in (form, FORMS[-1]):
        sched = fair.TaskScheduler(True, 2, 4)
        tasks = []
        for tid, inst in (("a", "X"), ("b", "X"), ("c", "Y")):
            t = rec.TaskCalls(tid, True, 3, 10, 0, sched.attach(inst), False, ReadyQueue())
            t.ready.push(object())
            sched.wake(t)
            tasks.append(t)
        order = []
        for _ in range(7):
            t = sched.next_task()
            order.append(t.task_id)
            t.inflight += 1
            t.instance.inflight += 1
            sched.served(t)
        sched.detach(tasks[0])
        order.append(sorted(sched.instance_inflight().items()))
        sched.unserved()
        order.append(sched.next_task().task_id)
        picks.append(order)
    assert picks[0] == picks[1]
    # X and Y tie (in flight, last served): X by id first, quantum 2 each, then turns
    assert picks[0][:7] == ["a", "b", "c", "c", "a", "b", "c"], picks[0]
