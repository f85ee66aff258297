"""Latency histograms the hot path can afford: per-function call latency.

A call's latency is the time from its ExecuteCall leaving the Worker to the
terminal frame of that attempt (CallCompleted or CallFailed), on the dispatch
actor's monotonic clock (ms, read once per event batch). It is observed for
every attempt of every call, roots and subcalls, so it costs no prometheus
call: ``sent`` remembers (function label, instant) under the call id,
``ended`` pops it and bumps one plain int bucket; the collector turns the
buckets into a histogram family only at scrape time.

- The ``function`` label goes through metric_labels.LabelValues: a function id
  that is no valid label value, or one past the cap of distinct functions, is
  counted as ``other``.
- Every ExecuteCall gets one terminal frame, so ``ended`` always closes the
  attempt it names, observed or not (a call of a task that was cancelled or
  timed out ends CANCELLED after the dispatcher forgot it: closed, not
  observed). A frame for another attempt than the one sent last (stale or
  forged) closes nothing. An attempt that never gets a frame (its executor was
  lost) is closed with ``forget``.
- Scrapes copy each bucket list (one C-level copy under the GIL) before reading.
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

from prometheus_client.core import HistogramMetricFamily

from blockx.adapters.telemetry.metric_labels import LabelValues

# Calls take from under a millisecond (add) to the call budget (minutes).
CALL_BUCKETS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000)
MAX_FUNCTIONS = 128
MAX_CACHED = 4096


class Buckets:
    """One label value's histogram: counts per bucket (the last is +Inf) and the sum."""
    __slots__ = ("counts", "sum_ms")

    def __init__(self, n: int) -> None:
        self.counts = [0] * (n + 1)
        self.sum_ms = 0


class CallLatency:
    __slots__ = ("label", "_open", "_by_label", "_by_function", "_bounds")

    def __init__(self, max_functions: int = MAX_FUNCTIONS, bounds_ms: tuple[int, ...] = CALL_BUCKETS_MS) -> None:
        self.label = LabelValues("function", max_values=max_functions)
        self._open: dict[str, tuple[str, int, int]] = {}     # call id -> (function id, sent at ms, attempt)
        self._by_label: dict[str, Buckets] = {}
        # function id -> its label's Buckets: one dict lookup per call instead of the label check
        # (bounded: past MAX_CACHED ids, the check runs each time)
        self._by_function: dict[str, Buckets] = {}
        self._bounds = bounds_ms

    def sent(self, call_id: str, function_id: str, attempt_seq: int, now_ms: int) -> None:
        self._open[call_id] = (function_id, now_ms, attempt_seq)

    def _buckets(self, function_id: str) -> Buckets:
        label = self.label(function_id)
        b = self._by_label.get(label)
        if b is None:
            b = self._by_label[label] = Buckets(len(self._bounds))
        if len(self._by_function) < MAX_CACHED:
            self._by_function[function_id] = b
        return b

    def ended(self, call_id: str, attempt_seq: object, now_ms: int, observe: bool = True) -> None:
        """The terminal frame of ``attempt_seq``: close it; ``observe`` when the
        dispatcher accepted the frame (its latency counts)."""
        opened = self._open.get(call_id)
        if opened is None or opened[2] != attempt_seq:
            return
        del self._open[call_id]
        if not observe:
            return
        fid, t0, _ = opened
        b = self._by_function.get(fid) or self._buckets(fid)
        ms = now_ms - t0
        b.counts[bisect_left(self._bounds, ms)] += 1
        b.sum_ms += ms

    def forget(self, call_ids: Iterable[str]) -> None:
        pop = self._open.pop
        for cid in call_ids:
            pop(cid, None)

    @property
    def open_count(self) -> int:
        return len(self._open)

    def family(self, describe_only: bool = False) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(
            "blockx_call_duration_seconds",
            "Time from a call attempt's ExecuteCall to its CallCompleted / CallFailed, by function "
            "(roots and subcalls; function ids past the label bound count as other).",
            labels=["function"])
        if describe_only:
            return fam
        for label, b in sorted(_copy(self._by_label).items()):
            counts = list(b.counts)
            total, cum = 0, []
            for bound, n in zip(self._bounds, counts):
                total += n
                cum.append((_le(bound), total))
            total += counts[-1]
            cum.append(("+Inf", total))
            fam.add_metric([label], cum, b.sum_ms / 1000.0)
        return fam


def _le(bound_ms: int) -> str:
    return repr(bound_ms / 1000.0)


def _copy(d: dict) -> dict:
    for _ in range(3):
        try:
            return dict(d)
        except RuntimeError:
            continue
    return {}


__all__ = ["CALL_BUCKETS_MS", "CallLatency", "MAX_FUNCTIONS"]
