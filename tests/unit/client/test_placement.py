"""Placement: power of two choices on free slots net of this client's in-flight tasks."""
import itertools

from blockx.client.placement import Placement
from blockx.client.registry import WorkerInfo


def w(addr, free, *, ready=True, draining=False, revision=1, slots=8):
    return WorkerInfo(addr, ready=ready, draining=draining, free_slots=free, task_slots=slots, revision=revision)


def cycling(*values):
    it = itertools.cycle(values)
    return lambda: next(it)


def test_the_candidate_with_more_free_slots_wins():
    p = Placement(cycling(0.0, 0.0))          # draws index 0, then index 1 of the rest
    assert p.choose([w("a", 1), w("b", 5)], 0.0).addr == "b"
    assert p.choose([w("a", 6), w("b", 5)], 0.0).addr == "a"


def test_not_ready_draining_and_excluded_workers_are_never_chosen():
    p = Placement()
    ws = [w("a", 9, ready=False), w("b", 9, draining=True), w("c", 9), w("d", 1)]
    picks = {p.choose(ws, 0.0, exclude={"c"}).addr for _ in range(50)}
    assert picks == {"d"}
    assert p.choose([w("a", 9, ready=False)], 0.0) is None


def test_a_burst_counts_against_a_stale_heartbeat():
    p = Placement(cycling(0.0, 0.0))
    a, b = w("a", 10), w("b", 6)
    picks = []
    for _ in range(8):
        addr = p.choose([a, b], 0.0).addr
        p.started(addr)
        picks.append(addr)
    # a's estimate falls 10, 9, 8, 7, 6 ... so b gets tasks long before a's heartbeat moves.
    assert picks.count("a") == 6 and picks.count("b") == 2
    assert p.estimate(a) == 4 and p.estimate(b) == 4


def test_a_new_heartbeat_resets_the_estimate_and_finished_tasks_count_for_the_worker():
    p = Placement()
    a = w("a", 4, revision=1)
    assert p.estimate(a) == 4
    for _ in range(3):
        p.started("a")
    assert p.estimate(a) == 1
    p.finished("a")
    assert p.estimate(a) == 2
    fresh = w("a", 2, revision=2)             # written after our tasks: it already counts them
    assert p.estimate(fresh) == 2


def test_a_worker_marked_down_waits_for_a_newer_heartbeat_or_the_timeout():
    p = Placement(down_for_s=5.0)
    a = w("a", 8, revision=7)
    p.mark_down("a", 7, now=100.0)
    assert p.choose([a], 101.0) is None
    assert p.choose([w("a", 8, revision=8)], 101.0).addr == "a"     # it heartbeat since
    p.mark_down("a", 8, now=200.0)
    assert p.choose([w("a", 8, revision=8)], 204.9) is None
    assert p.choose([w("a", 8, revision=8)], 205.0).addr == "a"     # down_for_s passed
