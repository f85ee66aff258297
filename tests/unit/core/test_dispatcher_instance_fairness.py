"""Instance-level max-min fair admission (DISPATCH_INSTANCE_FAIRNESS)."""
from blockx.core.dispatch.commands import BindCall
from blockx.core.dispatch.config import DispatcherConfig

from tests.unit.core.test_dispatcher_harness import Harness, of_type, spec


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
    assert h.core.instance_inflight() == {"A": 3, "B": 3}


def test_the_least_served_instance_catches_up():
    h = Harness(DispatcherConfig(instance_fairness=True), executors=("e",), contexts=3)
    h.submit("a", [spec("f", i) for i in range(10)], instance_id="A")
    assert h.core.instance_inflight() == {"A": 3}
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
    assert h.core.instance_inflight() == {"A": 2, "B": 2}
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
    h.core.remove_task("a")
    assert h.core.instance_inflight() == {"B": 1}
    h.core.cancel_task("b", "bye", h.now)
    assert h.core.instance_inflight() == {}


def test_empty_instance_id_is_its_own_instance():
    h = Harness(DispatcherConfig(instance_fairness=True), executors=("e",), contexts=0)
    h.submit("x", [spec("f", i) for i in range(3)])
    h.submit("y", [spec("g", i) for i in range(3)], instance_id="Y")
    h.set_executor("e", usable_contexts=4)
    assert _binds(h) == ["x/0", "y/0", "x/1", "y/1"]
