"""Follower: the background task of a source that reads a store once and then
follows it (the etcd prefix watch, the Redis function-code source).

It owns the task and the "first read done" flag: ``start`` creates the task
once and waits, bounded, for the first read; the task calls ``loaded()`` when
it has read the store; ``stop`` cancels the task and waits for it. The event
is made on first use, so a follower can be built outside a running loop."""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any


class Follower:
    __slots__ = ("_run", "_name", "_task", "_loaded")

    def __init__(self, run: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        self._run = run
        self._name = name
        self._task: asyncio.Task | None = None
        self._loaded: asyncio.Event | None = None

    def _event(self) -> asyncio.Event:
        if self._loaded is None:
            self._loaded = asyncio.Event()
        return self._loaded

    def loaded(self) -> None:
        """The store has been read (start's wait ends)."""
        self._event().set()

    async def start(self, wait_s: float) -> bool:
        """Start the task (once); wait up to ``wait_s`` for the first read.
        Whether the store has been read."""
        loaded = self._event()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)
        if wait_s > 0 and not loaded.is_set():
            try:
                await asyncio.wait_for(loaded.wait(), wait_s)
            except asyncio.TimeoutError:
                pass
        return loaded.is_set()

    async def stop(self) -> None:
        """Cancel the task and wait for it. Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping either way
                pass


__all__ = ["Follower"]
