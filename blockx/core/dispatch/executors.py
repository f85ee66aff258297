"""The dispatcher's executor table and selectExecutor (Filter -> Score).

Theory of operation: one ``scoring.ExecutorView`` per executor, kept in a list
sorted by executor_id and updated in place, so ``scoring.select_executor`` runs
over it with no per-call allocation and ties break on the smallest id.
- ``local_inflight`` is the dispatcher's own count of calls it bound to the
  executor (roots and subcalls); it moves on bind / unbind, never from
  snapshots.
- ``runnable`` is the heartbeat's runnable count minus the completions the
  dispatcher saw on that executor since that heartbeat (never below 0): a
  completed call left the executor's run queue before the next heartbeat says
  so. A new ``heartbeat_seq`` resets the compensation.
- Every other field is copied from the adapter's snapshots. An executor missing
  from a snapshot list is detached: it turns unhealthy and its view is dropped
  once no call is bound to it any more.
- A failed bind marks the view unhealthy until the next snapshot, so a vanished
  executor is not picked again in a tight bind / fail loop.
- With ``executor_selection_sample_size`` N > 0 each decision scores only N
  eligible executors (power-of-d choices), scanning from a start drawn from the
  injected ``rand`` (``sample_start``) and wrapping around the sorted list: the
  sample varies, so every executor takes calls. A pool of at most N executors
  is scored whole and draws nothing.
"""
from __future__ import annotations

from bisect import bisect_left
from typing import Any, Callable, Iterable


from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.types import ExecutorSnapshot
from blockx.core.dispatch.records import ExecutorRecord


class ExecutorTable:
    __slots__ = ("_scoring", "views", "recs", "records", "_ids", "select_fn", "_sample",
                 "_max_runnable", "_max_inflight", "_mem", "_stall", "_rand")

    def __init__(self, scoring: Any, config: DispatcherConfig, rand: Callable[[], float]) -> None:
        self._scoring = scoring
        self.select_fn = scoring.select_executor
        self.views: list[Any] = []              # sorted by executor_id
        self.recs: list[ExecutorRecord] = []    # parallel to views
        self._ids: list[str] = []               # parallel to views, for bisect
        self.records: dict[str, ExecutorRecord] = {}
        self._sample = config.executor_selection_sample_size
        self._max_runnable = config.executor_max_runnable
        self._max_inflight = config.executor_max_inflight
        self._mem = config.executor_memory_high_watermark
        self._stall = config.effective_stall_timeout_ms
        self._rand = rand

    # --- snapshots -----------------------------------------------------------------

    def update(self, snapshots: Iterable[ExecutorSnapshot]) -> None:
        seen: set[str] = set()
        records = self.records
        for s in snapshots:
            eid = s.executor_id
            if not isinstance(eid, str) or not eid:
                raise ValueError(f"executor snapshot needs a non-empty executor_id, got {eid!r}")
            seen.add(eid)
            rec = records.get(eid)
            if rec is None:
                rec = self._add(eid)
            v = rec.view
            v.healthy = bool(s.healthy)
            v.usable_contexts = s.usable_contexts
            v.memory_bytes = s.memory_bytes
            v.last_scheduler_active_at_ms = s.last_scheduler_active_at_ms
            v.running_call_id = s.running_call_id
            v.heartbeat_seq = s.heartbeat_seq
            if s.heartbeat_seq != rec.heartbeat_seq:
                rec.heartbeat_seq = s.heartbeat_seq
                rec.heartbeat_runnable = s.runnable_count
                rec.completions = 0
            r = rec.heartbeat_runnable - rec.completions
            v.runnable = r if r > 0 else 0
            rec.attached = True
        for eid in [e for e in records if e not in seen]:
            rec = records[eid]
            rec.attached = False
            rec.view.healthy = False
            if not rec.calls:
                self._drop(eid)

    def _add(self, eid: str) -> ExecutorRecord:
        view = self._scoring.ExecutorView(eid)
        rec = ExecutorRecord(view)
        i = bisect_left(self._ids, eid)
        self._ids.insert(i, eid)
        self.views.insert(i, view)
        self.recs.insert(i, rec)
        self.records[eid] = rec
        return rec

    def _drop(self, eid: str) -> None:
        i = bisect_left(self._ids, eid)
        del self._ids[i]
        del self.views[i]
        del self.recs[i]
        del self.records[eid]

    # --- selection and accounting -----------------------------------------------------

    def select_params(self) -> tuple:
        """(sample_size, max_runnable, max_inflight, memory_high_watermark,
        stall_timeout_ms): the constant arguments of select_fn, so the
        dispatch loop calls it without a Python frame in between."""
        return (self._sample, self._max_runnable, self._max_inflight, self._mem, self._stall)

    def sample_start(self, n: int) -> int:
        """Where a sampled scan of ``n`` views starts: uniform over the views,
        from the injected rand; 0 when the sample covers the whole pool."""
        if n <= self._sample:
            return 0
        r = self._rand()
        if not 0.0 <= r < 1.0:
            raise ValueError(f"rand() must return a float in [0, 1), got {r!r}")
        start = int(r * n)
        return start if start < n else n - 1

    def filter_reasons(self, now: int) -> dict[str, str]:
        """executor_id -> why it is not eligible ("" when it is); for tests/metrics."""
        fr = self._scoring.filter_reason
        return {v.executor_id: fr(v, now, self._max_runnable, self._max_inflight, self._mem,
                                  self._stall) for v in self.views}

    def unbind(self, call: Any) -> None:
        rec = call.exec
        call.exec = None
        rec.view.local_inflight -= 1
        del rec.calls[call.call_id]
        if not rec.attached and not rec.calls:
            self._drop(rec.view.executor_id)

    @staticmethod
    def note_completion(rec: ExecutorRecord) -> None:
        """A terminal frame arrived from rec: compensate its runnable count."""
        rec.completions += 1
        v = rec.view
        if v.runnable > 0:
            v.runnable -= 1

    # --- introspection -------------------------------------------------------------------

    def view(self, executor_id: str) -> Any:
        rec = self.records.get(executor_id)
        return None if rec is None else rec.view

    def call_ids(self, executor_id: str) -> list[str]:
        rec = self.records.get(executor_id)
        return [] if rec is None else list(rec.calls)
