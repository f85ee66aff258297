"""SecondsHistogram: a labelled latency histogram (seconds) whose observe is a
bisect and two additions, exported as a Prometheus histogram family at scrape.

A task observes its phases and its end-to-end time, and every unary RPC its
duration: through prometheus_client's Histogram that is a locked update per
bucket walk, about 10,500 instructions an observation, five per unary task.
Here ``observe`` finds the bucket with ``bisect_left`` (a bucket's bound is its
upper bound, inclusive, as prometheus_client counts) and adds to a plain int
and a float; the scrape thread copies each label's counts (one C-level copy
under the GIL) and builds the family. The exported buckets, sum and count are
the ones prometheus_client's Histogram would give for the same observations;
the family has no ``_created`` samples (as the per-function call histogram).

Label values come from the Worker's own code (phase names, method names, task
states through LabelValues): the caller bounds them."""
from __future__ import annotations

from bisect import bisect_left

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString


class _Series:
    __slots__ = ("counts", "total")

    def __init__(self, n: int) -> None:
        self.counts = [0] * (n + 1)       # the last is +Inf
        self.total = 0.0


class SecondsHistogram:
    __slots__ = ("name", "doc", "label", "_bounds", "_les", "_series")

    def __init__(self, name: str, doc: str, label: str, bounds: tuple[float, ...]) -> None:
        if list(bounds) != sorted(set(bounds)):
            raise ValueError(f"{name}: bucket bounds must increase strictly, got {bounds}")
        self.name = name
        self.doc = doc
        self.label = label
        self._bounds = tuple(float(b) for b in bounds)
        self._les = [floatToGoString(b) for b in self._bounds] + ["+Inf"]
        self._series: dict[str, _Series] = {}

    def observe(self, value: str, seconds: float) -> None:
        s = self._series.get(value)
        if s is None:
            s = self._series[value] = _Series(len(self._bounds))
        s.counts[bisect_left(self._bounds, seconds)] += 1
        s.total += seconds

    def family(self, describe_only: bool = False) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(self.name, self.doc, labels=[self.label])
        if describe_only:
            return fam
        for value, s in sorted(_copy(self._series).items()):
            counts, total = list(s.counts), s.total
            cum, n = [], 0
            for le, c in zip(self._les, counts):
                n += c
                cum.append((le, n))
            fam.add_metric([value], cum, total)
        return fam


def _copy(d: dict) -> dict:
    for _ in range(3):
        try:
            return dict(d)
        except RuntimeError:        # resized by the loop thread meanwhile
            continue
    return {}


__all__ = ["SecondsHistogram"]
