"""StartCoalescer on a real asyncio loop: which unary starts wait, for how long,
in what order, and that none is lost (a failing start, a full batch, close)."""
from __future__ import annotations

import asyncio
import logging

import pytest

from blockx.adapters.start_coalescer import StartCoalescer


class _Rt:
    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.ended = False


def _recorder():
    seen: list[tuple[str, float]] = []

    def drive(rt, cmd):
        seen.append((rt.task_id, asyncio.get_running_loop().time()))
    return seen, drive


async def _until(pred, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.005)


def test_arguments_are_checked():
    with pytest.raises(ValueError):
        StartCoalescer(None, -1, lambda rt, cmd: None)
    with pytest.raises(ValueError):
        StartCoalescer(None, 5, lambda rt, cmd: None, max_held=0)


async def test_a_task_with_nothing_else_running_starts_in_the_next_iteration():
    seen, drive = _recorder()
    sc = StartCoalescer(asyncio.get_running_loop(), 300, drive)
    for i in range(3):               # back to back, but each alone (a sequential client)
        sc.start(_Rt(f"t{i}"), None, others_running=False)
        assert len(seen) == i        # never inline: the SubmitTask answer goes first
        await asyncio.sleep(0)
        assert [t for t, _ in seen] == [f"t{j}" for j in range(i + 1)]
    assert sc.held == 0


async def test_a_task_arriving_within_the_window_while_others_run_waits_for_the_window():
    loop = asyncio.get_running_loop()
    seen, drive = _recorder()
    sc = StartCoalescer(loop, 300, drive)
    sc.start(_Rt("a"), None, others_running=False)       # starts at once
    await asyncio.sleep(0)
    t0 = loop.time()
    for name in ("b", "c", "d"):
        sc.start(_Rt(name), None, others_running=True)
    assert sc.held == 3
    await asyncio.sleep(0.05)
    assert [t for t, _ in seen] == ["a"]                 # held
    await _until(lambda: len(seen) == 4)
    assert [t for t, _ in seen] == ["a", "b", "c", "d"]  # arrival order
    assert all(at - t0 >= 0.29 for _, at in seen[1:])    # call_later never fires early
    assert len({at for _, at in seen[1:]}) == 1          # together, in one callback
    assert sc.held == 0


async def test_once_a_start_is_held_the_next_ones_join_it_whatever_runs():
    loop = asyncio.get_running_loop()
    seen, drive = _recorder()
    sc = StartCoalescer(loop, 200, drive)
    sc.start(_Rt("a"), None, others_running=False)
    sc.start(_Rt("b"), None, others_running=True)        # held
    sc.start(_Rt("c"), None, others_running=False)       # joins the batch, not ahead of it
    await asyncio.sleep(0.02)
    assert [t for t, _ in seen] == ["a"]
    await _until(lambda: len(seen) == 3)
    assert [t for t, _ in seen] == ["a", "b", "c"]


async def test_a_start_long_after_the_previous_one_does_not_wait():
    loop = asyncio.get_running_loop()
    seen, drive = _recorder()
    sc = StartCoalescer(loop, 50, drive)
    sc.start(_Rt("a"), None, others_running=False)
    await asyncio.sleep(0.08)                            # more than the window
    sc.start(_Rt("b"), None, others_running=True)
    await asyncio.sleep(0)
    assert [t for t, _ in seen] == ["a", "b"]


async def test_a_full_batch_starts_without_waiting_for_the_window():
    loop = asyncio.get_running_loop()
    seen, drive = _recorder()
    sc = StartCoalescer(loop, 10_000, drive, max_held=4)
    sc.start(_Rt("a"), None, others_running=False)
    for i in range(4):
        sc.start(_Rt(f"h{i}"), None, others_running=True)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert [t for t, _ in seen] == ["a", "h0", "h1", "h2", "h3"]
    sc.start(_Rt("late"), None, others_running=True)     # within the window of the last start: held anew
    assert sc.held == 1
    sc.close()


async def test_window_zero_holds_nothing():
    seen, drive = _recorder()
    sc = StartCoalescer(asyncio.get_running_loop(), 0, drive)
    for i in range(5):
        sc.start(_Rt(f"t{i}"), None, others_running=True)
        assert sc.held == 0
    await asyncio.sleep(0)
    assert len(seen) == 5


async def test_a_start_that_raises_does_not_keep_the_others_from_starting(caplog):
    loop = asyncio.get_running_loop()
    seen: list[str] = []

    def drive(rt, cmd):
        if rt.task_id == "bad":
            raise RuntimeError("boom")
        seen.append(rt.task_id)
    sc = StartCoalescer(loop, 20, drive)
    sc.start(_Rt("a"), None, others_running=False)
    for name in ("b", "bad", "c"):
        sc.start(_Rt(name), None, others_running=True)
    with caplog.at_level(logging.ERROR, logger="blockx.orchestrator"):
        await _until(lambda: len(seen) == 3)
    assert seen == ["a", "b", "c"]
    assert any("starting task bad failed" in r.getMessage() for r in caplog.records)


async def test_close_cancels_the_held_starts():
    loop = asyncio.get_running_loop()
    seen, drive = _recorder()
    sc = StartCoalescer(loop, 30, drive)
    sc.start(_Rt("a"), None, others_running=False)
    sc.start(_Rt("b"), None, others_running=True)
    sc.close()
    await asyncio.sleep(0.1)
    assert [t for t, _ in seen] == ["a"] and sc.held == 0


async def test_the_starts_of_one_iteration_are_driven_together_by_one_callback():
    # A session's batch of submits (start_soon) and the unary starts not held: one
    # callback in the next iteration drives them all, in arrival order; a start
    # that raises does not keep the others of its group from starting.
    loop = asyncio.get_running_loop()
    events: list = []
    sc = None

    def drive(rt, cmd):
        events.append((rt.task_id, sc.driving))
        if rt.task_id == "bad":
            raise RuntimeError("boom")
    sc = StartCoalescer(loop, 0, drive)
    for name in ("a", "bad", "b"):
        sc.start_soon(_Rt(name), None)
    sc.start(_Rt("c"), None, others_running=True)        # window 0: a unary start goes with them
    assert events == [] and not sc.driving
    await asyncio.sleep(0)
    assert events == [("a", True), ("bad", True), ("b", True), ("c", True)] and not sc.driving
    sc.start_soon(_Rt("late"), None)
    sc.close()             # a start not held was already under way, as a call_soon was: it still runs
    await asyncio.sleep(0)
    assert events[4:] == [("late", True)]


async def test_start_now_drives_the_iterations_starts_at_once_and_the_next_iteration_finds_none():
    # A TaskSession's handled batch: its tasks start in the caller's stack, not
    # behind what the loop queued after them; the callback scheduled for them
    # then drives nothing.
    loop = asyncio.get_running_loop()
    events: list = []
    sc = StartCoalescer(loop, 0, lambda rt, cmd: events.append(rt.task_id))
    sc.start_now()                                       # nothing accepted: nothing to do
    assert events == []
    sc.start_soon(_Rt("a"), None)
    sc.start_soon(_Rt("b"), None)
    sc.start_now()
    assert events == ["a", "b"]
    await asyncio.sleep(0)
    assert events == ["a", "b"]
