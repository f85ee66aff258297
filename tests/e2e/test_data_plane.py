"""The data plane end to end: a real bundle Worker with real executors, a real
PostgreSQL and an embedded DuckDB. Bundles are scanned into calls and the outputs
upserted; failures fail the task with a clear message and the Worker keeps serving."""
from __future__ import annotations

import json
import os
import signal
import time

import duckdb
import pytest

from tests.support.worker import outputs

pytestmark = pytest.mark.e2e


@pytest.fixture
def bundle_worker(start_worker, tmp_path, pg_db):
    root = tmp_path / "bundles"
    (root / "data").mkdir(parents=True)
    con = duckdb.connect()
    for day in (1, 2):
        con.execute(f"COPY (SELECT i AS id, i + 100 AS x FROM range({(day - 1) * 50}, {day * 50}) t(i)) "
                    f"TO '{root}/data/2026-11-0{day}.parquet' (FORMAT PARQUET)")
    env = {"STATE_DIR": str(tmp_path / "state"), "BUNDLE_ROOT": str(root),
           "BLOCKX_DATA_SOURCES": json.dumps({"main": pg_db, "local": f"duckdb://{tmp_path}/state/local.duckdb"}),
           "CALL_RETRY_JITTER_PERCENT": "0",
           # The killed-executor test holds its first call blocked while it checks the
           # table mid-task; under load that check can outlast the default 5 s call
           # budget, which then failed the task BUDGET_EXCEEDED before the kill. No test
           # here is about the budget, so the budget is out of their way.
           "CALL_DEADLINE_MS": "120000"}
    return start_worker(env, profile="bundle")


def sql(w, task_id, source, query):
    w.submit_calls(task_id, [("sql_rows", [source, query])])
    res = w.wait_terminal(task_id)
    assert res.state == 3, res.failure_message   # SUCCEEDED
    return outputs(res)[0]


def upserts(target, table, create=True):
    return ("tableUpserts", {"target": target, "table": table, "key": ["id"], "createTable": create})


@pytest.mark.parametrize("target", ["main", "local"])
def test_bundle_scan_to_table_upserts_and_a_resubmit_leaves_one_row_per_key(bundle_worker, target):
    w = bundle_worker
    payload = {"files": "data/2026-11-*.parquet", "functionId": "row_out"}
    for attempt in ("a", "b"):                 # the same work submitted twice
        w.submit(f"scan-{attempt}", "bundleScan", payload, result_handler=upserts(target, "results"))
        res = w.wait_terminal(f"scan-{attempt}")
        assert res.state == 3, res.failure_message
        assert json.loads(res.plugin_results[0].details)["rows"] == 100
    rows = sql(w, "check", target, "SELECT count(*) AS n, sum(v) AS s, min(id) AS lo, max(id) AS hi FROM results")
    assert rows == [{"n": 100, "s": sum((i + 100) * 2 for i in range(100)), "lo": 0, "hi": 99}]


def test_failures_fail_the_task_clearly_and_the_worker_keeps_serving(bundle_worker):
    w = bundle_worker
    cases = [
        ("bundleScan", {"files": "data/nope-*.parquet", "functionId": "row_out"}, None,
         "BUILDER_FAILED", "no file matches 'data/nope-*.parquet'"),
        ("bundleScan", {"files": "data/*.parquet", "functionId": "row_out"}, upserts("mian", "r"),
         "PLUGIN_FAILED", "unknown data source 'mian' (configured: local, main)"),
        ("callList", {"calls": [{"functionId": "echo", "args": [5]}]}, upserts("main", "r"),
         "PLUGIN_FAILED", "output 0 is number, expected a JSON object"),
        ("callList", {"calls": [{"functionId": "sql_rows", "args": ["main", "SELEC 1"]}]}, None,
         "CALL_FAILED", "syntax error"),
        ("callList", {"calls": [{"functionId": "sql_rows", "args": ["main", "DROP TABLE x"]}]}, None,
         "CALL_FAILED", "refused the DROP statement: only a plain read-only query"),
        ("callList", {"calls": [{"functionId": "echo", "args": [{"id": 1, "zz": 2}]}]},
         ("tableUpserts", {"target": "main", "table": "results2", "key": ["id"], "createTable": False}),
         "PLUGIN_FAILED", "table 'results2' does not exist"),
    ]
    for n, (builder, payload, handler, code, needle) in enumerate(cases):
        w.submit(f"bad-{n}", builder, payload, result_handler=handler)
        res = w.wait_terminal(f"bad-{n}")
        assert res.state == 4, (n, res)                              # FAILED
        assert res.failure_code == code and needle in res.failure_message, (n, res.failure_message)
    w.submit("good", "bundleScan", {"files": "data/*.parquet", "functionId": "echo", "per": "file"})
    res = w.wait_terminal("good")
    assert res.state == 3, res.failure_message
    assert outputs(res) == [{"path": "data/2026-11-01.parquet", "rows": 50},
                            {"path": "data/2026-11-02.parquet", "rows": 50}]


def test_a_killed_executor_mid_task_leaves_the_table_consistent(bundle_worker, executor_tmp):
    w = bundle_worker
    marker = str(executor_tmp / "crash.pid")
    calls = [{"functionId": "crash_row", "args": [i, marker]} for i in range(20)]
    w.submit("crash", "callList", {"calls": calls}, result_handler=upserts("main", "crashed"),
             retry=(3, 10, 0))
    deadline = time.monotonic() + 20
    while not os.path.exists(marker):
        assert time.monotonic() < deadline, "the first attempt never started"
        time.sleep(0.05)
    # Mid-task: nothing is written before the Plugin phase.
    assert sql(w, "mid", "main", "SELECT count(*) AS n FROM pg_tables WHERE tablename = 'crashed'") == [{"n": 0}]
    os.kill(int(open(marker).read()), signal.SIGKILL)
    res = w.wait_terminal("crash")
    assert res.state == 3, res.failure_message
    assert sql(w, "after", "main", "SELECT count(*) AS n, count(DISTINCT id) AS k FROM crashed") == [{"n": 20, "k": 20}]


def test_bundle_scan_to_bundle_write(bundle_worker, tmp_path):
    w = bundle_worker
    w.submit("bw", "bundleScan", {"files": "data/*.parquet", "functionId": "row_out"},
             result_handler=("bundleWrite", {"dir": "out/day"}))
    res = w.wait_terminal("bw")
    assert res.state == 3, res.failure_message
    assert json.loads(res.plugin_results[0].details) == {"rows": 100, "path": "out/day/bw.parquet"}
    rows = duckdb.connect().execute(
        f"SELECT count(*), sum(v) FROM read_parquet('{tmp_path}/bundles/out/day/bw.parquet')").fetchall()
    assert rows == [(100, sum((i + 100) * 2 for i in range(100)))]
    assert os.listdir(tmp_path / "bundles" / "out" / "day") == ["bw.parquet"]     # no temporary left
