"""While the Worker serves: close the DuckDB sources no operation has used for
dataPlane.duckdbIdleCloseMs (DataPlane.close_idle), so the blocks DuckDB's
buffer pool kept after a large write or scan go back to the system; the next
use opens the file again. Checks a few times per idle period, in a thread."""

from __future__ import annotations

import asyncio
import logging
import time

from blockx.log_event import log_event

log = logging.getLogger("blockx.data")


class IdleSources:
    def __init__(self, data, idle_close_ms: int) -> None:
        self._data = data
        # A source closes between idle_close_ms and 1.25 x idle_close_ms (at most 1 s late) after its last use.
        self._every_s = min(1.0, idle_close_ms / 4000.0)
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._every_s > 0:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._every_s)
            try:
                closed = await asyncio.to_thread(self._data.close_idle, time.monotonic())
            except Exception as exc:  # noqa: BLE001 - a failed close must not end the loop
                log_event(log, "data_source_idle_close_failed", logging.WARNING, error=str(exc))
                continue
            for name in closed:
                log_event(log, "data_source_idle_closed", logging.DEBUG, source=name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
