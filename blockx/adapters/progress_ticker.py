"""ProgressTicker: TaskProgress on the updates of watched tasks.

The counts are the DispatcherCore's (``task_progress``: total, done, failed,
retried of a task's root calls); nothing here keeps a copy of them beyond the
last progress published per watched task, which is what "changed" compares to.

- Every TaskUpdate built for a subscriber asks ``progress_of(snap)``: a running
  task's current counts (None before its Calls phase), a terminal task's final
  counts (``FinalSnapshot.progress``, captured by the orchestrator at the moment
  the task ended, before the dispatcher forgets it; for a retained result read
  later, the TaskStatistic's counts).
- One timer for all watched tasks fires every ``interval_s`` (250 ms) while at
  least one task is watched, and publishes a progress-only update (the task's
  current, non-terminal state) for each watched running task whose counts
  changed since the last one published. It stops re-arming when nothing is
  watched, and ``wake()`` (a first watcher attaching) re-arms it.
- Ordering: the terminal update is published synchronously when the task ends,
  and the tick only reaches tasks the WorkerCore still holds as non-terminal, so
  no progress follows a terminal update; subscribers drop progress for a task
  whose watch has ended and progress they already showed.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from blockx.core.types import TaskSnapshot
from blockx.worker.v1 import worker_pb2 as pb

log = logging.getLogger("blockx.progress")

PROGRESS_INTERVAL_S = 0.25
_RUNNING = pb.TASK_STATE_RUNNING


@dataclass(slots=True)
class FinalSnapshot(TaskSnapshot):
    """The terminal snapshot published when a task ends, with the dispatcher's
    final counts of it (None when its Calls phase never started)."""
    progress: tuple[int, int, int, int] | None = None


def progress_pb(p: tuple[int, int, int, int]) -> pb.TaskProgress:
    return pb.TaskProgress(calls_total=p[0], calls_done=p[1], calls_failed=p[2], calls_retried=p[3])


class ProgressTicker:
    def __init__(self, *, disp, core, subscriptions, interval_s: float = PROGRESS_INTERVAL_S) -> None:
        self._disp = disp
        self._core = core
        self._subs = subscriptions
        self.interval_s = interval_s
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._last: dict[str, tuple] = {}         # watched task id -> last progress published
        self.ticks = 0                            # timer firings (tests: nothing runs unwatched)

    # ---- what an update carries -------------------------------------------------------

    def progress_of(self, snap) -> tuple[int, int, int, int] | None:
        if snap.state >= 3:
            final = getattr(snap, "progress", None)
            if final is not None:
                return final
            r = snap.result
            if r is None:
                return None
            s = r.statistic
            return (s.call_count, s.call_count, s.calls_failed, s.call_retries)
        return self._disp.tasks.progress(snap.task_id)

    def final(self, task_id: str) -> tuple[int, int, int, int] | None:
        """The counts at the moment the task ends (call before the dispatcher drops it)."""
        self._last.pop(task_id, None)
        return self._disp.tasks.progress(task_id)

    # ---- the timer ----------------------------------------------------------------------

    @property
    def armed(self) -> bool:
        return self._timer is not None

    def wake(self) -> None:
        """A task gained its first watcher: make sure the timer runs."""
        if self._timer is None:
            self._timer = self._loop.call_later(self.interval_s, self._tick)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        self._timer = None
        self.ticks += 1
        try:
            self._publish_changes()
        except Exception:  # noqa: BLE001 - a bug here must not stop progress for good
            log.exception("progress tick failed")
        if self._subs.watched_count():
            self._timer = self._loop.call_later(self.interval_s, self._tick)
        else:
            self._last.clear()

    def _publish_changes(self) -> None:
        subs = self._subs
        last = self._last
        task_progress = self._disp.tasks.progress
        context = self._core.get_task_context
        seen = set()
        for tid in tuple(subs.watched_ids()):
            seen.add(tid)
            p = task_progress(tid)
            if p is None or last.get(tid) == p or context(tid) is None:
                continue
            last[tid] = p
            subs.publish_progress(pb.TaskUpdate(task_id=tid, state=_RUNNING, is_terminal=False,
                                                progress=progress_pb(p)))
        if len(last) > len(seen):
            for tid in [t for t in last if t not in seen]:
                del last[tid]
