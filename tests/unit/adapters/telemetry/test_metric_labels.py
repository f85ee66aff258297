"""Bounded label values: a charset and length check, a cap on distinct values
with `other` past it, and the Worker's own values always kept. Through Metrics:
error kinds, task failure codes and executor ids from hostile executors never make
more than a bounded number of series (scraped as Prometheus text)."""
import pytest
from prometheus_client.parser import text_string_to_metric_families

from blockx.adapters.telemetry.metric_labels import MAX_LABEL_LENGTH, OTHER, LabelValues, valid_label_value
from blockx.adapters.telemetry.metrics import KNOWN_ERROR_KINDS, Metrics

ESC = "\x1b"


@pytest.mark.parametrize("value,ok", [
    ("USER_ERROR", True), ("exec-0", True), ("TaskSession/submit", True), ("a.b:c", True), ("", True),
    ("x" * MAX_LABEL_LENGTH, True), ("x" * (MAX_LABEL_LENGTH + 1), False), (f"{ESC}[2J", False),
    ("a b", False), ('q"', False), ("line\nbreak", False), ("ünï", False), (None, False), (42, False),
    (["list"], False),
])
def test_valid_label_value(value, ok):
    assert valid_label_value(value) is ok


def test_a_label_keeps_its_known_values_and_at_most_max_values_others():
    lab = LabelValues("error_kind", known=("USER_ERROR",), max_values=3)
    assert [lab(v) for v in ("A", "B", "A", "C", "D", "E")] == ["A", "B", "A", "C", OTHER, OTHER]
    assert lab("USER_ERROR") == "USER_ERROR"                 # known: always its own series
    assert lab(f"{ESC}[31m") == OTHER and lab({"not": "hashable"}) == OTHER
    assert lab.admitted() == {"USER_ERROR", "A", "B", "C", OTHER}


def _series(m: Metrics, family: str) -> list[dict]:
    fams = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    return [s.labels for s in fams[family].samples if s.name.endswith("_total") or s.name == family]


def test_a_flood_of_error_kinds_keeps_blockx_calls_failed_bounded():
    m = Metrics(process_metrics=False)
    for i in range(1000):
        m.call_failed(f"KIND_{i}")
    m.call_failed(f"{ESC}]0;owned\x07")
    m.call_failed("USER_ERROR", 2)
    series = _series(m, "blockx_calls_failed")
    kinds = {s["error_kind"] for s in series}
    assert len(series) <= len(KNOWN_ERROR_KINDS) + 64 + 1
    assert "USER_ERROR" in kinds and OTHER in kinds and not any(ESC in k for k in kinds)
    assert sum(m.calls_failed.values()) == 1003               # counted, only the label is bounded
    assert len(m.calls_failed) <= 64 + 2                      # and the counter itself stays small


def test_failure_codes_and_states_are_bounded():
    m = Metrics(process_metrics=False)
    for i in range(500):
        m.task_terminal("FAILED", f"CODE_{i}")
    m.task_terminal("SUCCEEDED")
    m.task_terminal("FAILED", "CALL_FAILED")
    m.task_terminal(f"{ESC}[2J", "x" * 1000)
    series = _series(m, "blockx_tasks_terminal")
    assert len(series) <= 64 + 4
    assert {"state": "SUCCEEDED", "failure_code": ""} in series
    assert {"state": "FAILED", "failure_code": "CALL_FAILED"} in series
    assert {"state": OTHER, "failure_code": OTHER} in series


def test_executor_ids_from_heartbeats_are_bounded_and_summed_into_other():
    m = Metrics(process_metrics=False)
    usage = [("exec-0", 100, 1000, 500), (f"exec{ESC}[2J", 10, 100, 100), ("y" * 500, 5, 0, 0)]
    usage += [(f"flood-{i}", 1, 0, 0) for i in range(400)]
    m.executor_usage_fn = lambda: usage
    series = {s["executor"]: s for s in _series(m, "blockx_executor_memory_bytes")}
    assert len(series) <= 256 + 1 and "exec-0" in series and OTHER in series
    fams = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    mem = {s.labels["executor"]: s.value for s in fams["blockx_executor_memory_bytes"].samples}
    assert mem["exec-0"] == 100
    assert sum(mem.values()) == 100 + 10 + 5 + 400             # nothing lost, the rest under `other`
    assert len(_series(m, "blockx_executor_memory_bytes")) == len(series)    # stable across scrapes


def test_an_identity_label_allows_at_and_equals_and_is_still_bounded():
    from blockx.adapters.telemetry.metric_labels import OTHER, LabelValues
    ident = LabelValues("identity", max_values=2, extra_chars="@=")
    assert ident("ops@acme") == "ops@acme" and ident("CN=alice") == "CN=alice"
    assert ident("CN=bob") == OTHER                          # past the cap
    assert ident("CN=alice,O=acme") == OTHER                 # a comma is not allowed
    assert LabelValues("plain")("ops@acme") == OTHER         # other labels keep the common set


def test_the_per_identity_families_sum_the_identities_past_the_cap_and_skip_the_unrestricted():
    from blockx.adapters.telemetry.metrics import Metrics
    m = Metrics(process_metrics=False)
    m.identity_holdings_fn = lambda: {"alice": (2, 100), "": (1, 5), "CN=bob,O=x": (1, 1), "CN=carol,O=x": (3, 2)}
    m.identity_streams_fn = lambda: {("TaskSession", "alice"): 3, ("WatchTasks", "alice"): 1}
    m.memory_budget_fn = lambda: (1, 2048, 3)
    m.share_refused("alice", "slots")
    text = m.render().decode()
    for line in ('blockx_identity_slots{identity="alice"} 2.0', 'blockx_identity_slots{identity="other"} 4.0',
                 'blockx_identity_queued_call_bytes{identity="other"} 3.0',
                 'blockx_identity_streams{identity="alice",kind="TaskSession"} 3.0',
                 'blockx_share_refusals_total{identity="alice",share="slots"} 1.0',
                 "blockx_memory_budget_bytes 2048.0", "blockx_memory_budget_refusals_total 3.0"):
        assert line in text, line
    assert 'identity=""' not in text
