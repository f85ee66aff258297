"""At Worker start, in a thread beside serving: remove the bundle writers' work
files a killed Worker left under the bundle root (plugins.data.work_files), and
log what was found. Stops at the next directory when the Worker shuts down."""

from __future__ import annotations

import asyncio
import logging
import threading

from blockx.log_event import log_event
from blockx.plugins.data.work_files import sweep

log = logging.getLogger("blockx.data")


class BundleSweep:
    def __init__(self, root: str) -> None:
        self._root = root
        self._stop = threading.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._root:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            out = await asyncio.to_thread(sweep, self._root, stop=self._stop)
        except OSError as exc:
            log_event(log, "bundle_work_sweep_failed", logging.WARNING, root=self._root, error=str(exc))
            return
        if out.removed or out.busy or out.young or out.failed:
            log_event(log, "bundle_work_swept", logging.WARNING if out.failed else logging.INFO,
                      root=self._root, removed=len(out.removed), paths=out.removed[:20],
                      in_use=out.busy, too_young=out.young, failed=out.failed[:20])

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.wait({self._task})
