"""Per-function call latency: buckets, the bounded function label, attempts
that are closed without being observed, and the exposition."""
from prometheus_client.parser import text_string_to_metric_families

from blockx.adapters.telemetry.latency_metrics import CALL_BUCKETS_MS, CallLatency
from blockx.adapters.telemetry.metrics import Metrics


def _samples(m: Metrics) -> dict:
    out = {}
    for fam in text_string_to_metric_families(m.render().decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_each_attempt_lands_in_its_bucket_with_inclusive_bounds():
    m = Metrics(process_metrics=False)
    lat = m.call_latency
    for i, ms in enumerate((0, 1, 2, 3, 300_000, 300_001)):
        lat.sent(f"c{i}", "add", 1, 1_000)
        lat.ended(f"c{i}", 1, 1_000 + ms)
    s = _samples(m)
    b = lambda le: s[("blockx_call_duration_seconds_bucket", (("function", "add"), ("le", le)))]  # noqa: E731
    assert (b("0.001"), b("0.002"), b("0.005"), b("300.0"), b("+Inf")) == (2, 3, 4, 5, 6)
    assert s[("blockx_call_duration_seconds_count", (("function", "add"),))] == 6
    assert s[("blockx_call_duration_seconds_sum", (("function", "add"),))] == (1 + 2 + 3 + 300_000 + 300_001) / 1000
    assert len(CALL_BUCKETS_MS) + 1 == len([k for k in s if k[0] == "blockx_call_duration_seconds_bucket"])
    assert lat.open_count == 0


def test_stale_attempts_and_unobserved_ends_close_correctly():
    lat = CallLatency()
    lat.sent("c", "f", 1, 0)
    lat.sent("c", "f", 2, 10)            # a retry replaces the attempt
    lat.ended("c", 1, 20)                # the stale attempt's frame closes nothing
    assert lat.open_count == 1
    lat.ended("c", 2, 30, observe=False)  # a cancelled task's call: closed, not counted
    assert lat.open_count == 0
    lat.ended("never-sent", 1, 40)
    lat.sent("x", "f", 1, 0)
    lat.sent("y", "f", 1, 0)
    lat.forget(["x", "y", "z"])          # their executor was lost
    assert lat.open_count == 0
    fam = lat.family()
    assert fam.samples == []


def test_the_function_label_is_bounded():
    lat = CallLatency(max_functions=2)
    for i, fid in enumerate(("a", "b", "c", "bad label\n" * 10)):
        lat.sent(str(i), fid, 1, 0)
        lat.ended(str(i), 1, 5)
    labels = {s.labels["function"] for s in lat.family().samples}
    assert labels == {"a", "b", "other"}


def test_task_and_grpc_histograms_and_the_queued_gauge_are_exported():
    m = Metrics(process_metrics=False)
    m.calls_queued = 7
    m.observe_task("SUCCEEDED", 0.2)
    m.observe_task("FAILED", 2.0)
    m.observe_grpc("CancelTask", 0.0003)
    s = _samples(m)
    assert s[("blockx_calls_queued", ())] == 7
    assert s[("blockx_task_duration_seconds_count", (("state", "SUCCEEDED"),))] == 1
    assert s[("blockx_task_duration_seconds_bucket", (("le", "0.25"), ("state", "SUCCEEDED")))] == 1
    assert s[("blockx_task_duration_seconds_bucket", (("le", "1.0"), ("state", "FAILED")))] == 0
    assert s[("blockx_grpc_request_duration_seconds_bucket", (("le", "0.0005"), ("method", "CancelTask")))] == 1
