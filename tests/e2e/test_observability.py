"""Executor resources, readiness, memory diagnostics and the shipped alert rules
against a real worker with real executors:
- the executor gauges appear with the right labels after the executors
  heartbeat, and their values are those processes' own RSS and CPU time;
- the memory diagnostics line appears (interval shortened via WORKER_CONFIG);
- every metric name the shipped dashboard and alert rules query is one this
  worker exports (scraped after real work)."""
import json
import os
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.promql import PROMETHEUS_SYNTHETIC, alert_exprs, dashboard_exprs, exported_names, metric_names
from tests.support.worker import WorkerProcess

pytestmark = pytest.mark.e2e

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")
EXECUTORS = ("exec-0", "exec-1")


@pytest.fixture(scope="module")
def obs_worker(tmp_path_factory):
    from tests.e2e.conftest import make_functions_dir
    tmp = tmp_path_factory.mktemp("obs")
    cfg = tmp / "worker.json"
    cfg.write_text(json.dumps({"memoryDiagnosticsIntervalMs": 300}))
    w = WorkerProcess({"WORKER_CONFIG": str(cfg), "RESULT_RETENTION_MS": "60000"},
                      functions_dir=make_functions_dir(tmp), executors=len(EXECUTORS))
    w.start()
    try:
        yield w
    finally:
        w.stop()


def scrape(w) -> dict:
    out = {}
    for fam in text_string_to_metric_families(w.metrics_text()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def executor_pids(worker_pid: int) -> dict[str, int]:
    """executor id -> pid of the worker's executor children, from /proc."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == worker_pid and b"--executor-id" in argv:
            out[argv[argv.index(b"--executor-id") + 1].decode()] = int(entry)
    return out


def proc_usage(pid: int) -> tuple[int, float, float]:
    with open(f"/proc/{pid}/statm") as f:
        rss = int(f.read().split()[1]) * PAGE
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return rss, int(fields[11]) / TICKS, int(fields[12]) / TICKS      # utime, stime


def run_some_work(w, tmp_path) -> None:
    w.submit_calls("obs-ok", [("add", [1, 2]), ("square", [3])])
    w.submit_calls("obs-fail", [("fail", ["on purpose"])])
    w.submit_calls("obs-retry", [("flaky", [str(tmp_path / "flaky.count"), 1])], retry=(3, 5, 0))
    for tid in ("obs-ok", "obs-fail", "obs-retry"):
        w.wait_terminal(tid)


def test_executor_gauges_carry_each_executors_own_rss_and_cpu(obs_worker):
    w = obs_worker
    deadline = time.monotonic() + 20
    while True:
        s = scrape(w)
        have = {dict(k[1]).get("executor") for k in s if k[0] == "blockx_executor_memory_bytes"}
        if have == set(EXECUTORS):
            break
        assert time.monotonic() < deadline, f"executor gauges never appeared for both executors: {have}"
        time.sleep(0.05)
    pids = executor_pids(w.proc.pid)
    assert set(pids) == set(EXECUTORS), pids
    for eid in EXECUTORS:
        mem = s[("blockx_executor_memory_bytes", (("executor", eid),))]
        user = s[("blockx_executor_cpu_seconds_total", (("executor", eid), ("mode", "user")))]
        system = s[("blockx_executor_cpu_seconds_total", (("executor", eid), ("mode", "system")))]
        rss, utime, stime = proc_usage(pids[eid])
        # The heartbeat (every 200 ms) is at most a moment old: the same order as
        # the process's own figures now, and CPU never ahead of them.
        assert rss / 2 < mem < rss * 2, (eid, mem, rss)
        assert 0 < user <= utime + 0.05, (eid, user, utime)
        assert 0 <= system <= stime + 0.05, (eid, system, stime)
    assert {k[1] for k in s if k[0] == "blockx_executor_cpu_seconds_total"} == {
        (("executor", e), ("mode", m)) for e in EXECUTORS for m in ("user", "system")}
    assert s[("blockx_worker_ready", ())] == 1 and s[("blockx_worker_draining", ())] == 0


def test_memory_diagnostics_line_reads_the_owners(obs_worker, executor_tmp):
    w = obs_worker
    run_some_work(w, executor_tmp)
    n = len(w.events_named("memory_diagnostics"))
    deadline = time.monotonic() + 10
    while True:      # a line sampled after the three tasks retired
        lines = w.events_named("memory_diagnostics")[n:]
        if lines and lines[-1]["retained_results"] >= 3 and set(lines[-1]["executors_rss_bytes"]) == set(EXECUTORS):
            break
        assert time.monotonic() < deadline, w.events_named("memory_diagnostics")[-3:]
        time.sleep(0.1)
    line = lines[-1]
    assert line["level"] == "info" and line["logger"] == "blockx.memory"
    assert line["rss_bytes"] > 10 * 1024 * 1024
    assert line["queued_calls"] == 0 and line["active_tasks"] == 0
    assert line["code_snapshots"] >= 1
    assert line["executors_rss_total_bytes"] == sum(line["executors_rss_bytes"].values()) > 0
    # about one line per 300 ms, not one per tick
    before = len(w.events_named("memory_diagnostics"))
    time.sleep(1.5)
    assert 2 <= len(w.events_named("memory_diagnostics")) - before <= 8


def test_every_metric_the_dashboard_and_alerts_query_is_exported(obs_worker, executor_tmp):
    w = obs_worker
    run_some_work(w, executor_tmp)    # phase histograms, terminal counters, failures, retries
    exported = exported_names(w.metrics_text()) | PROMETHEUS_SYNTHETIC
    used = {}
    for where, exprs in (("dashboard", dashboard_exprs()), ("alerts", alert_exprs())):
        for e in exprs:
            for name in metric_names(e):
                used.setdefault(name, where)
    assert len(used) >= 20
    # the check has teeth: a misspelt or suffix-confused name is not "exported"
    assert not {"blockx_executor_memory_bytes_total", "blockx_slots_total", "blockx_task_phase_duration_seconds"} & exported
    missing = {n: where for n, where in used.items() if n not in exported}
    assert not missing, f"queried but not exported by the worker: {missing}"
