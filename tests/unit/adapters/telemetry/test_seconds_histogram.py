"""SecondsHistogram exports what prometheus_client's Histogram would for the same observations."""
from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.registry import Collector

from blockx.adapters.telemetry.metrics import GRPC_BUCKETS, PHASE_BUCKETS
from blockx.adapters.telemetry.seconds_histogram import SecondsHistogram


class _One(Collector):
    def __init__(self, h: SecondsHistogram) -> None:
        self.h = h

    def collect(self):
        return [self.h.family()]


def _samples(registry) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in registry.collect() for s in fam.samples if not s.name.endswith("_created")}


@pytest.mark.parametrize("bounds", [PHASE_BUCKETS, GRPC_BUCKETS])
def test_the_same_buckets_sum_and_count_as_prometheus_client(bounds):
    # Values on the bounds (inclusive upper bounds), between them, under the first and past the last.
    values = [0.0, *bounds, *(b * 0.999 for b in bounds), *(b * 1.001 for b in bounds), bounds[-1] * 10, 1e-9]
    ref_reg, mine_reg = CollectorRegistry(), CollectorRegistry()
    ref = Histogram("x_seconds", "doc", ["phase"], buckets=bounds, registry=ref_reg)
    mine = SecondsHistogram("x_seconds", "doc", "phase", bounds)
    mine_reg.register(_One(mine))
    for i, v in enumerate(values):
        label = ("calls", "builder")[i % 2]
        ref.labels(label).observe(v)
        mine.observe(label, v)
    want, got = _samples(ref_reg), _samples(mine_reg)
    assert set(got) == set(want)
    for key, v in want.items():
        assert got[key] == pytest.approx(v, rel=1e-12, abs=0), key


def test_a_label_never_observed_has_no_series_and_bounds_must_increase():
    h = SecondsHistogram("y_seconds", "doc", "method", (0.1, 1.0))
    assert h.family().samples == []
    h.observe("SubmitTask", 0.05)
    assert {s.labels["method"] for s in h.family().samples} == {"SubmitTask"}
    assert h.family(describe_only=True).samples == []
    with pytest.raises(ValueError, match="increase strictly"):
        SecondsHistogram("z", "doc", "m", (1.0, 0.5))
