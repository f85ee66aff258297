"""The memory diagnostics log line: every `memoryDiagnosticsIntervalMs`
(default 60 s; 0 disables) one `memory_diagnostics` event with what holds the
Worker's memory: the interpreter's GC counts, RSS, and what the cores hold.

Fields: `rss_bytes` (this process), `queued_calls` (roots waiting for an
executor), `calls_held` (call contexts the dispatcher holds: admitted calls and
subcalls; a queued call gets one only when it is admitted), `active_tasks`,
`retained_results` (terminal results kept for resultRetentionMs),
`code_snapshots` (function code epochs retained), `executors_rss_bytes`
({executor id: RSS} from their latest heartbeats) and its sum
`executors_rss_total_bytes`, `gc_counts` (objects per generation since its last
collection) and `gc_frozen` (objects frozen at start-up).

Every value is read from its owner at the moment of logging (the cores, the
function code view, the executor adapter); nothing here keeps a copy. The
sampler runs on the event loop, like every writer of those owners."""
from __future__ import annotations

import asyncio
import gc
import logging
import os
import resource

from blockx.log_event import log_event

__all__ = ["MemoryDiagnostics", "rss_bytes"]

log = logging.getLogger("blockx.memory")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """This process's resident set size now (the peak without /proc)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class MemoryDiagnostics:
    def __init__(self, *, core, disp, fcode, adapter, interval_ms: int,
                 logger: logging.Logger = log) -> None:
        if type(interval_ms) is not int or interval_ms < 0:
            raise ValueError(f"memoryDiagnosticsIntervalMs must be a non-negative integer, got {interval_ms!r}")
        self.core = core            # WorkerCore: active tasks, retained results
        self.disp = disp            # DispatcherCore: queued and held calls
        self.fcode = fcode          # Function Code View: retained snapshots
        self.adapter = adapter      # ExecutorAdapter: executors' RSS
        self.interval_ms = interval_ms
        self.log = logger
        self.lines = 0

    def sample(self) -> dict:
        executors = {eid: mem for eid, mem, _user, _system in self.adapter.resource_usage()}
        return {
            "rss_bytes": rss_bytes(),
            "queued_calls": self.disp.queued_call_count,
            "calls_held": self.disp.call_count,
            "active_tasks": self.core.active_task_count(),
            "retained_results": self.core.retained_result_count(),
            "code_snapshots": len(self.fcode.retained_epochs()),
            "executors_rss_bytes": executors,
            "executors_rss_total_bytes": sum(executors.values()),
            "gc_counts": list(gc.get_count()),
            "gc_frozen": gc.get_freeze_count(),
        }

    def log_once(self) -> None:
        log_event(self.log, "memory_diagnostics", **self.sample())
        self.lines += 1

    async def run(self) -> None:
        """Log one line per interval until cancelled; a failing sample is logged
        and the next interval tries again."""
        if self.interval_ms <= 0:
            return
        while True:
            await asyncio.sleep(self.interval_ms / 1000.0)
            try:
                self.log_once()
            except Exception:  # noqa: BLE001 - diagnostics never take the Worker down
                self.log.exception("memory diagnostics sample failed")
