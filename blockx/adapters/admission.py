"""Phase-level admission (spec: builderSem / executorSem / pluginSem / scanSem).

Bounds how many tasks are in each phase at once, independently of the slot
count, so a burst of submissions cannot run 50 builders or 50 scans together."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass(slots=True)
class Admission:
    builder: asyncio.Semaphore
    executor: asyncio.Semaphore
    plugin: asyncio.Semaphore
    scan: asyncio.Semaphore

    @classmethod
    def from_config(cls, cfg) -> "Admission":
        """`cfg`: blockx.core.config.AdmissionConfig."""
        return cls(asyncio.Semaphore(cfg.builder_slots), asyncio.Semaphore(cfg.executor_task_slots),
                   asyncio.Semaphore(cfg.plugin_slots), asyncio.Semaphore(cfg.scan_slots))
