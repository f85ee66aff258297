"""bundleWrite consuming settled batches, end to end: a real bundle Worker, real
executors. A streamed bundleScan -> bundleWrite task writes the same Parquet file
(schema and rows) as the same task with "stream": false, although its fields
change type along the call list; it keeps only its budgeted outputs; a field
that turns from numbers to strings fails the task naming it; a task that fails
or times out after batches were spooled leaves no file and no temporary; what a
killed Worker's write left, the next Worker's start removes, and never the work
of another Worker writing into the same bundle root."""
from __future__ import annotations

import json
import os
import signal
import time

import duckdb
import pytest

pytestmark = pytest.mark.e2e

BATCH_ROWS = 500
KEEP = 10
ROWS = 3_000


def _bundle(root, name: str, x_sql: str) -> None:
    """<root>/<name>/part-{0,1}.parquet: ids 0..ROWS-1, x = x_sql of i."""
    (root / name).mkdir(parents=True)
    con = duckdb.connect()
    for n, (lo, hi) in enumerate(((0, ROWS // 2), (ROWS // 2, ROWS))):
        con.execute(f"COPY (SELECT i AS id, {x_sql} AS x FROM range({lo}, {hi}) t(i)) "
                    f"TO '{root}/{name}/part-{n}.parquet' (FORMAT PARQUET)")
    con.close()


@pytest.fixture
def bundle_worker(start_worker, tmp_path):
    root = tmp_path / "bundles"
    _bundle(root, "ok", "i + 100")
    _bundle(root, "strs", "CASE WHEN i >= 2000 THEN -3 ELSE i END")     # "v" a string from row 2000 on
    _bundle(root, "fail", "CASE i WHEN 2600 THEN -1 ELSE i END")         # a call that raises late
    _bundle(root, "slow", "CASE i WHEN 2999 THEN -2 ELSE i END")         # the last call outlives the task
    conf = tmp_path / "worker.json"
    conf.write_text(json.dumps({"streamBuild": {"batchMaxRows": BATCH_ROWS},
                                "writerStream": {"writeBytes": 4096, "keepOutputs": KEEP}}))
    env = {"STATE_DIR": str(tmp_path / "state"), "BUNDLE_ROOT": str(root), "WORKER_CONFIG": str(conf),
           "CALL_DEADLINE_MS": "120000"}
    w = start_worker(env, profile="bundle")
    w.root = root
    w.bundle_env = env
    return w


def parquet(path) -> tuple[list, list]:
    con = duckdb.connect()
    try:
        schema = con.execute(f"SELECT name, type, converted_type, logical_type, repetition_type "
                             f"FROM parquet_schema('{path}')").fetchall()
        return schema, con.execute(f"SELECT * FROM read_parquet('{path}')").fetchall()
    finally:
        con.close()


def left_nothing(out) -> None:
    """No file and no temporary in `out` (the spool is removed as the task ends:
    allow the abort that follows the terminal update a moment)."""
    deadline = time.monotonic() + 10
    while out.exists() and os.listdir(out):
        assert time.monotonic() < deadline, f"left behind: {os.listdir(out)}"
        time.sleep(0.05)


def run(w, task_id: str, files: str, timeout_ms: int = 120_000, **cfg):
    w.submit(task_id, "bundleScan", {"files": files, "functionId": "row_mixed"},
             result_handler=("bundleWrite", {"dir": "out", **cfg}), timeout_ms=timeout_ms)
    return w.wait_terminal(task_id, timeout=timeout_ms / 1000 + 30)


def submit_slow(w, task_id: str, *, timeout_ms: int, spooled_within: float):
    """Submit the task whose last call outlives it and wait until its streamed
    write has spooled a batch (its .tmp.d is in <root>/out): that directory."""
    w.submit(task_id, "bundleScan", {"files": "slow/*.parquet", "functionId": "row_mixed"},
             result_handler=("bundleWrite", {"dir": "out"}), timeout_ms=timeout_ms)
    out = w.root / "out"
    deadline = time.monotonic() + spooled_within
    while not (out.exists() and any(n.endswith(".tmp.d") for n in os.listdir(out))):   # the spool is open
        assert time.monotonic() < deadline, "the streamed write never spooled a batch"
        time.sleep(0.05)
    return out


def test_the_streamed_file_equals_the_whole_task_file(bundle_worker):
    w = bundle_worker
    res = run(w, "streamed", "ok/*.parquet")
    assert res.state == 3, res.failure_message
    assert res.outputs_written == ROWS and len(res.outputs) == KEEP       # consumed as the batches settled
    assert json.loads(res.plugin_results[0].details) == {"rows": ROWS, "path": "out/streamed.parquet"}
    whole = run(w, "whole", "ok/*.parquet", stream=False)
    assert whole.state == 3, whole.failure_message
    assert whole.outputs_written == 0 and len(whole.outputs) == ROWS      # the writer after the Calls phase
    out = w.root / "out"
    assert sorted(os.listdir(out)) == ["streamed.parquet", "whole.parquet"]
    schema, rows = parquet(out / "streamed.parquet")
    assert (schema, rows) == parquet(out / "whole.parquet")
    types = {r[0]: r[1] for r in schema}
    assert types["w"] == "DOUBLE" and types["f"] == "DOUBLE" and types["v"] == "INT32", schema
    assert rows[0] == (0, 200, None, {"k": 0, "f": None}) and rows[-1] == (2999, 6198, 2999.0, {"k": 2999, "f": 1.5})
    assert oct((out / "streamed.parquet").stat().st_mode & 0o777) == "0o640"


def test_a_field_turning_from_numbers_to_strings_fails_naming_it(bundle_worker):
    w = bundle_worker
    res = run(w, "strs", "strs/*.parquet")
    assert res.state == 4 and res.failure_code == "PLUGIN_FAILED", res
    assert "field 'v' is INTEGER in earlier rows and VARCHAR in rows" in res.failure_message, res.failure_message
    assert '"stream": false' in res.failure_message
    left_nothing(w.root / "out")
    res = run(w, "strs-whole", "strs/*.parquet", stream=False)            # the whole-task inference
    assert res.state == 3, res.failure_message
    assert {r[0]: r[1] for r in parquet(w.root / "out" / "strs-whole.parquet")[0]}["v"] == "BYTE_ARRAY"


def test_a_call_failing_mid_task_leaves_no_file_and_no_temporary(bundle_worker):
    w = bundle_worker
    res = run(w, "fail", "fail/*.parquet")
    assert res.state == 4 and res.failure_code == "CALL_FAILED", res
    assert "row 2600 refused" in res.failure_message
    assert res.outputs_written == 0 and len(res.outputs) == 0
    left_nothing(w.root / "out")


def test_a_task_timing_out_after_batches_were_spooled_leaves_nothing(bundle_worker):
    w = bundle_worker
    out = submit_slow(w, "slow", timeout_ms=20_000, spooled_within=18)
    res = w.wait_terminal("slow", timeout=60)
    assert res.state == 4 and res.failure_code == "TIMED_OUT", res
    left_nothing(out)


def test_a_killed_workers_spool_is_swept_by_the_next_start_and_a_live_ones_kept(bundle_worker, start_worker,
                                                                                 tmp_path):
    a = bundle_worker
    out = submit_slow(a, "killed", timeout_ms=300_000, spooled_within=60)
    spool = [n for n in os.listdir(out) if n.endswith(".tmp.d")]
    # A second Worker on the same bundle root, while the first is writing: its
    # start finds the spool in use and leaves it.
    b = start_worker({**a.bundle_env, "STATE_DIR": str(tmp_path / "state-b")}, profile="bundle")
    found = b.wait_event("bundle_work_swept", timeout=30)
    assert found["removed"] == 0 and found["in_use"] == 1, found
    assert [n for n in os.listdir(out) if n.endswith(".tmp.d")] == spool
    a.signal(signal.SIGKILL)
    a.wait_exit(30)
    assert [n for n in os.listdir(out) if n.endswith(".tmp.d")] == spool       # nothing else removes it
    c = start_worker({**a.bundle_env, "STATE_DIR": str(tmp_path / "state-c")}, profile="bundle")
    found = c.wait_event("bundle_work_swept", timeout=30)
    assert found["removed"] == 1 and found["paths"] == [f"out/{spool[0]}"], found
    assert os.listdir(out) == []
    res = run(c, "after", "ok/*.parquet")                # and the root is written as before
    assert res.state == 3, res.failure_message
    assert os.listdir(out) == ["after.parquet"]
