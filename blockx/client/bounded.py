"""Running one coroutine per item with at most N in flight, yielding results as
they finish: what ``map`` of WorkerClient and of Cluster both do."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


async def as_completed_bounded(items: Iterable[Any], run: Callable[[Any], Coroutine[Any, Any, T]],
                               concurrency: int) -> AsyncGenerator[T, None]:
    """``run(item)`` for each item, ``concurrency`` at once; results in finishing
    order. Leaving early (or an error) cancels what still runs."""
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    loop = asyncio.get_running_loop()
    it = iter(items)
    running: set[asyncio.Task] = set()

    def refill() -> None:
        while len(running) < concurrency:
            try:
                item = next(it)
            except StopIteration:
                return
            running.add(loop.create_task(run(item)))

    refill()
    try:
        while running:
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                running.discard(t)
                yield t.result()
            refill()
    finally:
        for t in running:
            t.cancel()
