"""The shipped alert rules and Grafana dashboard, checked by
the real promtool (Debian package `prometheus`; `make prometheus` installs it):
the rules load, their unit tests pass (each alert fires and stays quiet where it
should), and every dashboard expression is valid PromQL. That the metric names
exist is checked against a real worker in tests/e2e/test_observability.py."""
from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from tests.support.binaries import missing
from tests.support.promql import (ALERTS, ALERTS_TEST, DASHBOARD, alert_rules, dashboard,
                                  dashboard_exprs, dashboard_panels, metric_names)


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if not path:
        missing("promtool", "run `make prometheus` (Debian package prometheus)")
    return path


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_promtool_check_rules_passes(promtool):
    r = run(promtool, "check", "rules", str(ALERTS))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in r.stdout


def test_promtool_check_rules_rejects_a_broken_rule(promtool, tmp_path):
    # The check above can fail: a rule with bad PromQL is refused.
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [
        {"alert": "Broken", "expr": "rate(blockx_executor_restarts_total[5m] > 1"}]}]}))
    r = run(promtool, "check", "rules", str(bad))
    assert r.returncode != 0


def test_promtool_unit_tests_of_the_alerts_pass(promtool):
    r = run(promtool, "test", "rules", str(ALERTS_TEST))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_the_alerts_the_issue_names_exist_with_severity_and_text():
    rules = {r["alert"]: r for r in alert_rules()}
    assert set(rules) >= {"BlockxWorkerDown", "BlockxWorkerNotReady", "BlockxExecutorsRestartingInLoop",
                          "BlockxExecutorWedgeKills", "BlockxEtcdRegistrationLost", "BlockxSlotsExhausted",
                          "BlockxTaskFailureRatioHigh", "BlockxTasksTimingOut"}
    for name, r in rules.items():
        assert r["labels"]["severity"] in ("warning", "critical"), name
        assert r["annotations"]["summary"] and r["annotations"]["description"], name
    tested = {t["alertname"] for case in yaml.safe_load(ALERTS_TEST.read_text())["tests"]
              for t in case["alert_rule_test"]}
    assert tested == set(rules), "every alert has a promtool unit test"


def test_every_dashboard_expression_is_valid_promql(promtool, tmp_path):
    # promtool parses rule expressions: each panel query becomes a recording rule,
    # with Grafana's variables given the values Grafana would substitute.
    exprs = dashboard_exprs()
    rules = [{"record": f"dashboard:expr_{i}",
              "expr": e.replace("$__rate_interval", "1m").replace("$instance", ".*")}
             for i, e in enumerate(exprs)]
    f = tmp_path / "dashboard_rules.yml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    r = run(promtool, "check", "rules", str(f))
    assert r.returncode == 0, r.stdout + r.stderr


def test_dashboard_is_a_grafana_dashboard_with_the_panels_the_issue_names():
    d = dashboard()
    assert d["uid"] == "blockx-worker" and d["title"] and isinstance(d["schemaVersion"], int)
    assert {v["name"] for v in d["templating"]["list"]} == {"datasource", "instance"}
    panels = dashboard_panels(d)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for p in panels:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        if p["type"] != "row":
            assert p["targets"] and p["datasource"]["uid"] == "${datasource}", p["title"]
            assert all(t["refId"] and t["expr"] for t in p["targets"]), p["title"]
    by_title = {p["title"]: p for p in panels}
    reads = {title: set().union(*(metric_names(t["expr"]) for t in p.get("targets", [])))
             for title, p in by_title.items() if p["type"] != "row"}
    wanted = {
        "Slots by state": {"blockx_slots"},
        "Task rates by outcome": {"blockx_tasks_terminal_total"},
        "Phase latency quantiles": {"blockx_task_phase_duration_seconds_bucket"},
        "Call rates": {"blockx_calls_dispatched_total", "blockx_calls_completed_total", "blockx_calls_failed_total"},
        "Retries": {"blockx_calls_retried_total"},
        "Executors healthy": {"blockx_executors_healthy"},
        "Executor memory (RSS)": {"blockx_executor_memory_bytes"},
        "Executor CPU": {"blockx_executor_cpu_seconds_total"},
        "Restarts and wedge kills": {"blockx_executor_restarts_total", "blockx_executor_wedge_kills_total"},
        "etcd registration state": {"blockx_etcd_registration_state"},
    }
    for title, names in wanted.items():
        assert names <= reads.get(title, set()), (title, reads.get(title))
    quantiles = [t["expr"] for t in by_title["Phase latency quantiles"]["targets"]]
    assert all(e.startswith("histogram_quantile(") for e in quantiles) and len(quantiles) >= 3
    assert DASHBOARD.read_text().endswith("\n")


def test_metric_names_reads_names_not_functions_labels_or_keywords():
    e = ('histogram_quantile(0.99, sum by (le, phase) (rate(blockx_task_phase_duration_seconds_bucket'
         '{instance=~"$instance", phase!="x"}[$__rate_interval]))) > 1e3 '
         'unless on (instance, job) blockx_worker_draining == 1 or up{job="blockx-worker"} offset 5m')
    assert metric_names(e) == {"blockx_task_phase_duration_seconds_bucket", "blockx_worker_draining", "up"}
