"""WorkerStatusReader: the answer to GetWorkerStatus.

It reads, at request time, from the parts that own each value and keeps no copy
of any: the slot table, the active tasks' phases, readiness and draining from
WorkerCore; each executor from the pool manager (process, restarts, kills) and
the executor adapter's snapshots (attachment, in-flight, runnable, RSS, CPU,
last heartbeat); the outbox depth from the adapter; the code epoch from the
Function Code View; the etcd registration state from the publisher; the
cumulative counters from Metrics. A client computes rates from the deltas of
the counters between two reads (``blockx top`` does).

Executor state, from the two owners: HEALTHY (attached to the adapter and
heartbeating), STARTING (a process runs, not attached yet), RESTARTING (waiting
out the restart delay), BACKOFF (restarted too often; waiting out the back-off),
STOPPED. An executor the adapter knows but the pool does not (started by hand,
as in tests) is listed from the adapter alone.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from blockx import __version__
from blockx.core.types import TaskPhase
from blockx.worker.v1 import worker_pb2 as pb

if TYPE_CHECKING:     # what it reads, built by the app before it
    from blockx.adapters.executor.adapter import ExecutorAdapter
    from blockx.adapters.executor.pool import PoolManager
    from blockx.adapters.telemetry.metrics import Metrics
    from blockx.core.worker.core import WorkerCore

_POOL_STATE = {"RUNNING": "STARTING", "WAITING": "RESTARTING", "BACKOFF": "BACKOFF", "STOPPED": "STOPPED"}
_PHASES = ("PREPARING", "BUILDER", "CALLS", "PLUGIN")


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class WorkerStatusReader:
    def __init__(self, *, core: WorkerCore, adapter: ExecutorAdapter, metrics: Metrics, pool: PoolManager | None = None, fcode=None, publisher=None,
                 started_at_ms: int | None = None, worker_addr: str = "",
                 wall: Callable[[], int] = _wall_ms) -> None:
        self.core = core
        self.adapter = adapter
        self.metrics = metrics
        self.pool = pool
        self.fcode = fcode
        self.publisher = publisher          # wired once the gRPC port (and so the address) is known
        self.worker_addr = worker_addr
        self._wall = wall
        self.started_at_ms = wall() if started_at_ms is None else started_at_ms

    def ready(self) -> bool:
        """Readiness as it is published (the etcd heartbeat, this status, the health
        service): WorkerCore's own rule (an executor healthy, not draining), read
        from its heartbeat rather than restated here. blockx_worker_ready reads it."""
        return bool(self.core.derive_heartbeat(self._wall())["ready"])

    def read(self) -> pb.WorkerStatus:
        now = self._wall()
        core = self.core
        hb = core.derive_heartbeat(now)
        st = pb.WorkerStatus(
            worker_addr=self.worker_addr, version=__version__, now_ms=now, started_at_ms=self.started_at_ms,
            uptime_ms=max(0, now - self.started_at_ms), ready=hb["ready"], draining=hb["draining"],
            slots=pb.SlotCounts(total=hb["taskSlots"], free=hb["freeSlots"], reserved=hb["reservedSlots"],
                                running=hb["runningTasks"]),
            outbox_depth=self.adapter.max_outbox_backlog(),
            code_epoch=self._code_epoch(now),
            etcd_state=self.publisher.state if self.publisher is not None else self.metrics.etcd_state)
        phases = st.tasks_by_phase
        for name in _PHASES:
            phases[name] = 0
        for tid in {s.task_id for s in core.slots if s.task_id}:
            ctx = core.get_task_context(tid)
            if ctx is not None and ctx.phase is not TaskPhase.TERMINAL:
                phases[ctx.phase.name] += 1
        st.executors.extend(self._executors())
        self._counters(st.counters)
        return st

    def _code_epoch(self, now: int) -> int:
        if self.fcode is None:
            return 0
        epoch = self.fcode.current_epoch(now)
        return epoch if isinstance(epoch, int) else 0

    def _executors(self) -> list[pb.ExecutorStatus]:
        adapter = self.adapter
        now = adapter.clock_ms()
        attached = {s.executor_id: s for s in adapter.snapshots()}
        out = []
        infos = self.pool.slot_info() if self.pool is not None else []
        for info in infos:
            out.append(self._one(info.executor_id, attached.pop(info.executor_id, None), info, now))
        for eid in sorted(attached):
            out.append(self._one(eid, attached[eid], None, now))
        return out

    @staticmethod
    def _one(eid: str, snap, info, now: int) -> pb.ExecutorStatus:
        e = pb.ExecutorStatus(executor_id=eid)
        if info is not None:
            e.pid = info.pid or 0
            e.restarts = info.restarts
            e.kills = info.kills
            e.state = _POOL_STATE.get(info.state.value, info.state.value)
        if snap is not None and snap.healthy:
            e.healthy = True
            e.state = "HEALTHY"
            if not e.pid:
                e.pid = snap.pid
            e.inflight = snap.inflight_count
            e.runnable = snap.runnable_count
            e.rss_bytes = snap.memory_bytes
            e.cpu_user_seconds = snap.cpu_user_ms / 1000.0
            e.cpu_system_seconds = snap.cpu_system_ms / 1000.0
            e.capacity = snap.capacity
            e.last_heartbeat_age_ms = max(0, now - snap.last_heartbeat_at_ms)
        else:
            e.last_heartbeat_age_ms = -1
            if not e.state:
                e.state = "STOPPED"
        return e

    def _counters(self, c: pb.WorkerCounters) -> None:
        m = self.metrics
        c.tasks_submitted = m.tasks_submitted
        by_code = c.tasks_failed_by_code
        for (state, code), n in list(m.tasks_terminal.items()):
            if state == "SUCCEEDED":
                c.tasks_succeeded += n
            elif state == "FAILED":
                c.tasks_failed += n
                by_code[code or "UNKNOWN"] = by_code.get(code or "UNKNOWN", 0) + n
        c.calls_dispatched = m.calls_dispatched
        c.calls_completed = m.calls_completed
        c.calls_failed = sum(m.calls_failed.values())
        c.calls_retried = m.calls_retried
        c.executor_restarts = m.executor_restarts
        c.executor_wedge_kills = m.executor_wedge_kills
        c.executor_heartbeat_timeouts = m.executor_heartbeat_timeouts
