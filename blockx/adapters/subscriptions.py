"""SubscriptionManager: the WatchTasks fan-out.

One `Subscription` (an unbounded queue) per WatchTasks stream; a task id maps to
the streams watching it. The manager only routes snapshots the orchestrator
publishes; the truth stays in WorkerCore. It translates the first stream
attaching to a task and the last one leaving into the core's Watch events
(`on_first_attach(task_id)`, `on_last_detach(task_id, disconnected)`), which drive
the Watch-disconnect grace.
"""
from __future__ import annotations

import asyncio
from typing import Callable

from blockx.core.types import TaskSnapshot

# Sentinels put on a stream's queue.
CLOSED = object()          # the worker is shutting down
GONE = "gone"              # the task vanished (its reservation expired)


class Subscription:
    __slots__ = ("queue", "task_ids")

    def __init__(self, task_ids: list[str]) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()
        self.task_ids = task_ids


class SubscriptionManager:
    def __init__(self, on_first_attach: Callable[[str], None],
                 on_last_detach: Callable[[str, bool], None]) -> None:
        self._by_task: dict[str, list[Subscription]] = {}
        self._all: set[Subscription] = set()
        self._on_first_attach = on_first_attach
        self._on_last_detach = on_last_detach
        self.closed = False

    def __len__(self) -> int:
        return len(self._all)

    def watched(self, task_id: str) -> bool:
        return task_id in self._by_task

    def attach(self, task_ids: list[str]) -> Subscription:
        sub = Subscription(task_ids)
        self._all.add(sub)
        for tid in task_ids:
            subs = self._by_task.get(tid)
            if subs is None:
                self._by_task[tid] = [sub]
                self._on_first_attach(tid)
            else:
                subs.append(sub)
        return sub

    def detach(self, sub: Subscription, disconnected: bool) -> None:
        """`disconnected`: the stream broke before every task was terminal."""
        if sub not in self._all:
            return
        self._all.discard(sub)
        for tid in sub.task_ids:
            subs = self._by_task.get(tid)
            if subs is None:
                continue
            try:
                subs.remove(sub)
            except ValueError:
                continue
            if not subs:
                del self._by_task[tid]
                self._on_last_detach(tid, disconnected)

    def publish(self, snap: TaskSnapshot) -> None:
        subs = self._by_task.get(snap.task_id)
        if subs:
            for sub in subs:
                sub.queue.put_nowait(snap)

    def publish_gone(self, task_id: str) -> None:
        subs = self._by_task.get(task_id)
        if subs:
            for sub in subs:
                sub.queue.put_nowait((GONE, task_id))

    def close_all(self) -> None:
        self.closed = True
        for sub in list(self._all):
            sub.queue.put_nowait(CLOSED)
