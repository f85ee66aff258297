"""StartCoalescer: unary SubmitTasks that arrive close together start together
(submitLingerMs, SUBMIT_LINGER_MS; 0, the default, is off).

Why: over the unary contract each SubmitTask reaches the Worker in a loop
iteration of its own (measured at 64 in flight: 1.03 SubmitTasks an iteration,
and 1.02 executor reads, each with one CallResult), so every task pays alone for
what a batch shares: an executor waking to read one ExecuteCall, the Worker
reading one CallResult, a dispatch epilogue, an outbox flush, a log write. A
TaskSession shares them for free, its tasks arriving in batches. So the start
of a unary task that arrives within ``window`` of the previous one, while
another task is running, is held; the held tasks start together ``window``
after the first of them was held: their calls leave in one flush, the
executors read them in one wake-up and answer them together.

Rules:
- A task starts at once (the next loop iteration, as it always did) when none is
  held and either no other task is running or the previous unary start came
  ``window`` or more ago: the sequential tasks of a lone client never wait.
- Held tasks start in arrival order, together, ``window`` after the first was
  held, or in the next loop iteration once ``max_held`` are held. They wait the
  whole window even when the tasks running meanwhile end: starting them when
  none runs any more was measured, and the batches then stay too small to pay
  (a task runs about 1 ms), so the window is a trade the operator makes:
  throughput for up to ``window`` of latency (submitLingerMs, off by default).
- A held task that ends before it starts (CancelTask, its deadline, the drain)
  is skipped by the driver itself (TaskPhases.drive returns for an ended task).
- ``window`` 0 holds nothing. This object holds only the order of the held
  starts and the time of the last one; the tasks' state stays the core's.
- Every start that is not held (``start_soon``: a session's tasks, and a unary
  task not held) goes with the others accepted in the same loop iteration: one
  callback in the next iteration drives them all, in arrival order (a lone
  task still starts in the next iteration, as it always did), unless the
  caller drives them at once with ``start_now`` (a TaskSession, once its
  request batch is handled). ``driving`` is true while a group is driven."""
from __future__ import annotations

import logging
from typing import Any, Callable

log = logging.getLogger("blockx.orchestrator")


class StartCoalescer:
    __slots__ = ("_loop", "_window_s", "_max_held", "_drive", "_held", "_last", "_release_handle", "_soon",
                 "driving")

    def __init__(self, loop, window_ms: int, drive: Callable[[Any, Any], None], max_held: int = 256) -> None:
        if window_ms < 0 or max_held < 1:
            raise ValueError(f"window_ms must be >= 0 and max_held >= 1, got {window_ms} and {max_held}")
        self._loop = loop
        self._window_s = window_ms / 1000.0
        self._max_held = max_held
        self._drive = drive                  # (runtime, PrepareTaskActivation) -> None
        self._held: list[tuple[Any, Any]] = []
        self._last = float("-inf")           # loop time of the last unary start
        self._release_handle: Any = None     # the timer (or, once full, the call_soon) that starts them
        self._soon: list[tuple[Any, Any]] = []   # starts of this iteration, driven in the next one
        self.driving = False

    @property
    def held(self) -> int:
        """Starts held (a task that ended meanwhile included: its driver skips it)."""
        return len(self._held)

    def start(self, rt, cmd, others_running: bool) -> None:
        """Start (now, or with the ones held) the task of ``rt``; ``others_running``:
        another task of this worker has not ended."""
        loop = self._loop
        if not self._window_s:               # off (the default): no clock read on the hot path
            self.start_soon(rt, cmd)
            return
        now = loop.time()
        last, self._last = self._last, now
        held = self._held
        if not held and (not others_running or now - last >= self._window_s):
            self.start_soon(rt, cmd)
            return
        held.append((rt, cmd))
        if len(held) >= self._max_held:
            if self._release_handle is not None:
                self._release_handle.cancel()
            self._release_handle = loop.call_soon(self._release)
        elif len(held) == 1:
            self._release_handle = loop.call_later(self._window_s, self._release)

    def start_soon(self, rt, cmd) -> None:
        """Start the task of ``rt`` in the next loop iteration, with every other
        start of this one."""
        soon = self._soon
        soon.append((rt, cmd))
        if len(soon) == 1:
            self._loop.call_soon(self._start_group)

    def start_now(self) -> None:
        """Drive the starts of this iteration (start_soon) now, in the caller's
        stack, instead of in the next iteration (the callback already scheduled
        then finds none): for a caller that has accepted all it will accept in
        this iteration and whose own answer does not have to go first (a
        TaskSession's request batch, once handled)."""
        if self._soon and not self.driving:
            self._start_group()

    def _start_group(self) -> None:
        group, self._soon = self._soon, []
        if group:
            self._drive_group(group)

    def _release(self) -> None:
        self._release_handle = None
        held, self._held = self._held, []
        self._drive_group(held)

    def _drive_group(self, group: list) -> None:
        self.driving = True
        try:
            for rt, cmd in group:
                try:
                    self._drive(rt, cmd)
                except Exception:  # noqa: BLE001 - one task's failure must not keep the others from starting
                    log.exception("starting task %s failed", getattr(rt, "task_id", "?"))
        finally:
            self.driving = False

    def close(self) -> None:
        """At shutdown: nothing more starts (the tasks held are ended by the drain)."""
        if self._release_handle is not None:
            self._release_handle.cancel()
            self._release_handle = None
        self._held.clear()
