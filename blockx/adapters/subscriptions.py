"""SubscriptionManager: the fan-out of task snapshots to WatchTasks streams and
TaskSessions.

A subscriber is any object with ``deliver(snap)``, ``gone(task_id)`` and
``close()``. A WatchTasks stream uses a ``Subscription`` (a queue that its
handler drains, bounded: a client that stops reading overflows it, the queue is
dropped and ``on_overflow`` ends that stream alone); a TaskSession is its own subscriber and turns each
snapshot into an event of its next batch. A task id maps to the subscribers
watching it. The manager only routes the snapshots the orchestrator publishes;
the truth stays in WorkerCore. It translates the first subscriber attaching to a
task and the last one leaving into the core's Watch events
(``on_first_attach(task_id)``, ``on_last_detach(task_id, disconnected)``), which
drive the Watch-disconnect grace.

Progress-only updates (``publish_progress``, from the ProgressTicker) go to a
subscriber's ``progress(update)``: the update is a ready pb.TaskUpdate with the
task's current state and its TaskProgress; the subscriber drops it once the
task's watch has ended or when it already showed those counts.

Subscribers may detach (a task's terminal update ends its watch) while a
snapshot is being delivered: delivery iterates over a copy.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterable, Protocol

from blockx.core.types import TaskSnapshot

# Sentinels put on a WatchTasks stream's queue.
CLOSED = object()          # the worker is shutting down
GONE = "gone"              # the task vanished (its reservation expired)
OVERFLOW = object()        # the queue overflowed: the stream ends RESOURCE_EXHAUSTED
DEFAULT_MAX_PENDING = 65_536


class Subscriber(Protocol):
    def deliver(self, snap: TaskSnapshot) -> None: ...
    def gone(self, task_id: str) -> None: ...
    def progress(self, update) -> None: ...
    def close(self) -> None: ...


class Subscription:
    """The queue of one WatchTasks stream, at most ``max_pending`` items. The item
    past that replaces the queue with OVERFLOW alone (what was queued is dropped:
    the memory is what the bound protects) and calls ``on_overflow()`` once, which
    must end the stream even while its handler waits on a write."""
    __slots__ = ("queue", "overflowed", "_max", "_on_overflow")

    def __init__(self, max_pending: int = DEFAULT_MAX_PENDING, on_overflow: Callable[[], object] | None = None) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()
        self.overflowed = False
        self._max = max_pending
        self._on_overflow = on_overflow

    def _put(self, item) -> None:
        q = self.queue
        if q.qsize() < self._max:
            if not self.overflowed:        # once overflowed, the stream is ending: nothing more
                q.put_nowait(item)
        elif not self.overflowed:
            self.overflowed = True
            self.queue = q = asyncio.Queue()
            q.put_nowait(OVERFLOW)
            if self._on_overflow is not None:
                self._on_overflow()

    def deliver(self, snap: TaskSnapshot) -> None:
        self._put(snap)

    def gone(self, task_id: str) -> None:
        self._put((GONE, task_id))

    def progress(self, update) -> None:
        self._put(update)

    def close(self) -> None:
        self.queue.put_nowait(CLOSED)


class SubscriptionManager:
    def __init__(self, on_first_attach: Callable[[str], None],
                 on_last_detach: Callable[[str, bool], None]) -> None:
        self._by_task: dict[str, list] = {}
        self._tasks_of: dict[Any, set[str]] = {}      # subscriber -> the task ids it watches
        self._on_first_attach = on_first_attach
        self._on_last_detach = on_last_detach
        self.closed = False

    def __len__(self) -> int:
        return len(self._tasks_of)

    def watched(self, task_id: str) -> bool:
        return task_id in self._by_task

    def watched_ids(self):
        """The task ids with at least one subscriber (a view: do not keep it)."""
        return self._by_task.keys()

    def watched_count(self) -> int:
        return len(self._by_task)

    def register(self, sub) -> None:
        """Track ``sub`` (so close_all reaches it) before it watches anything."""
        self._tasks_of.setdefault(sub, set())

    def attach(self, task_ids: Iterable[str], sub=None):
        """``sub`` (a new queue Subscription, default bound, when None) watches ``task_ids`` too."""
        if sub is None:
            sub = Subscription()
        mine = self._tasks_of.setdefault(sub, set())
        for tid in task_ids:
            if tid in mine:
                continue
            mine.add(tid)
            subs = self._by_task.get(tid)
            if subs is None:
                self._by_task[tid] = [sub]
                self._on_first_attach(tid)
            else:
                subs.append(sub)
        return sub

    def detach_task(self, sub, task_id: str, disconnected: bool) -> None:
        """``sub`` stops watching one task."""
        mine = self._tasks_of.get(sub)
        if mine is None or task_id not in mine:
            return
        mine.discard(task_id)
        self._unlink(sub, task_id, disconnected)

    def detach(self, sub, disconnected: bool) -> None:
        """``sub`` leaves. `disconnected`: its stream broke before every task was terminal."""
        mine = self._tasks_of.pop(sub, None)
        if mine is None:
            return
        for tid in mine:
            self._unlink(sub, tid, disconnected)

    def _unlink(self, sub, task_id: str, disconnected: bool) -> None:
        subs = self._by_task.get(task_id)
        if subs is None:
            return
        try:
            subs.remove(sub)
        except ValueError:
            return
        if not subs:
            del self._by_task[task_id]
            self._on_last_detach(task_id, disconnected)

    def publish(self, snap: TaskSnapshot) -> None:
        subs = self._by_task.get(snap.task_id)
        if subs:
            if len(subs) == 1:
                subs[0].deliver(snap)
            else:
                for sub in tuple(subs):
                    sub.deliver(snap)

    def publish_progress(self, update) -> None:
        """A progress-only pb.TaskUpdate to every subscriber of its task."""
        subs = self._by_task.get(update.task_id)
        if subs:
            for sub in tuple(subs):
                sub.progress(update)

    def publish_gone(self, task_id: str) -> None:
        subs = self._by_task.get(task_id)
        if subs:
            for sub in tuple(subs):
                sub.gone(task_id)

    def close_all(self) -> None:
        self.closed = True
        for sub in list(self._tasks_of):
            sub.close()
