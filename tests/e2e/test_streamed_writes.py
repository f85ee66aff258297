"""Writers that consume settled batches, end to end: a real bundle Worker, real
executors, an embedded DuckDB and a real PostgreSQL. A streamed bundleScan ->
tableUpserts task writes every row once, keeps only its budgeted outputs in the
result and says how many it wrote; a task that fails or times out mid-way
leaves nothing (no row, no table) although earlier batches were already
written in its transaction; and the Worker's memory no longer grows with the
rows of the task."""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import asyncpg
import duckdb
import grpc
import orjson
import pytest

from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc
from tests.support import auth
from tests.support.worker import outputs

pytestmark = pytest.mark.e2e

BATCH_ROWS = 500
KEEP = 10


def _bundle(root, name: str, rows: int, special: dict[int, int] | None = None) -> None:
    """<root>/<name>/part-{0,1}.parquet: rows ids 0..rows-1, x = id + 100, except
    the ids in `special` (id -> x)."""
    (root / name).mkdir(parents=True)
    con = duckdb.connect()
    half = rows // 2
    cases = " ".join(f"WHEN {i} THEN {x}" for i, x in (special or {}).items())
    x = f"CASE i {cases} ELSE i + 100 END" if cases else "i + 100"
    for n, (lo, hi) in enumerate(((0, half), (half, rows))):
        con.execute(f"COPY (SELECT i AS id, {x} AS x FROM range({lo}, {hi}) t(i)) "
                    f"TO '{root}/{name}/part-{n}.parquet' (FORMAT PARQUET)")
    con.close()


@pytest.fixture
def stream_worker(start_worker, tmp_path, pg_db):
    root = tmp_path / "bundles"
    _bundle(root, "ok", 3_000)
    _bundle(root, "fail", 3_000, {2_600: -1})           # a call that raises in the 6th batch
    _bundle(root, "slow", 3_000, {2_999: -2})           # the last call outlives the task
    conf = tmp_path / "worker.json"
    conf.write_text(json.dumps({"streamBuild": {"batchMaxRows": BATCH_ROWS},
                                "writerStream": {"writeBytes": 4096, "keepOutputs": KEEP}}))
    env = {"STATE_DIR": str(tmp_path / "state"), "BUNDLE_ROOT": str(root), "WORKER_CONFIG": str(conf),
           "CALL_DEADLINE_MS": "120000",
           "BLOCKX_DATA_SOURCES": json.dumps({"main": pg_db, "local": f"duckdb://{tmp_path}/state/local.duckdb"})}
    w = start_worker(env, profile="bundle")
    w.pg_dsn = pg_db
    return w


def upserts(target, table, **kw):
    return ("tableUpserts", {"target": target, "table": table, "key": ["id"], "createTable": True, **kw})


def sql(w, task_id, source, query):
    w.submit("q-" + task_id, "callList", {"calls": [{"functionId": "sql_rows", "args": [source, query]}]})
    # A call of a timed-out task may still hold an executor until it returns.
    res = w.wait_terminal("q-" + task_id, timeout=90)
    assert res.state == 3, res.failure_message
    return outputs(res)[0]


def table_exists(w, task_id, target, table) -> bool:
    q = ("SELECT count(*) AS n FROM pg_tables WHERE tablename = '{t}'" if target == "main" else
         "SELECT count(*) AS n FROM information_schema.tables WHERE table_name = '{t}'")
    return sql(w, task_id, target, q.format(t=table))[0]["n"] > 0


@pytest.mark.parametrize("target", ["main", "local"])
def test_a_streamed_task_writes_every_row_once_and_keeps_only_its_budget(stream_worker, target):
    w = stream_worker
    w.submit("ok", "bundleScan", {"files": "ok/*.parquet", "functionId": "row_gate"},
             result_handler=upserts(target, "results"), timeout_ms=120_000)
    res = w.wait_terminal("ok", timeout=150)
    assert res.state == 3, res.failure_message
    assert res.outputs_written == 3_000
    assert len(res.outputs) == KEEP                                  # writerStream.keepOutputs
    assert [json.loads(o) for o in res.outputs] == [{"id": i, "v": (i + 100) * 2} for i in range(KEEP)]
    assert json.loads(res.plugin_results[0].details)["rows"] == 3_000
    rows = sql(w, "ok", target, "SELECT count(*) AS n, count(DISTINCT id) AS k, sum(v) AS s FROM results")
    assert rows == [{"n": 3_000, "k": 3_000, "s": sum((i + 100) * 2 for i in range(3_000))}]
    # a task's keepOutputs overrides the Worker's, and stream=false runs the writer after the Calls phase
    w.submit("ok-keep", "bundleScan", {"files": "ok/*.parquet", "functionId": "row_gate"},
             result_handler=upserts(target, "results", keepOutputs=0), timeout_ms=120_000)
    res = w.wait_terminal("ok-keep", timeout=150)
    assert res.state == 3 and res.outputs_written == 3_000 and len(res.outputs) == 0
    w.submit("ok-all", "bundleScan", {"files": "ok/*.parquet", "functionId": "row_gate"},
             result_handler=upserts(target, "results", stream=False), timeout_ms=120_000)
    res = w.wait_terminal("ok-all", timeout=150)
    assert res.state == 3 and res.outputs_written == 0 and len(res.outputs) == 3_000
    assert sql(w, "ok2", target, "SELECT count(*) AS n FROM results") == [{"n": 3_000}]


@pytest.mark.parametrize("target", ["main", "local"])
def test_a_call_failing_mid_task_leaves_no_row_and_no_table(stream_worker, target):
    w = stream_worker
    w.submit("fail", "bundleScan", {"files": "fail/*.parquet", "functionId": "row_gate"},
             result_handler=upserts(target, "failed_t"), timeout_ms=120_000)
    res = w.wait_terminal("fail", timeout=150)
    assert res.state == 4 and res.failure_code == "CALL_FAILED", res
    assert "row 2600 refused" in res.failure_message
    assert res.outputs_written == 0 and len(res.outputs) == 0
    assert not table_exists(w, "fail", target, "failed_t")       # createTable rolled back with the rows


def _open_transactions(dsn: str) -> int:
    async def count():
        conn = await asyncpg.connect(dsn)
        try:
            return await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = 'blockx-worker' AND state LIKE 'idle in transaction%'")
        finally:
            await conn.close()
    return asyncio.run(count())


def test_a_task_timing_out_after_batches_were_written_leaves_nothing(stream_worker):
    w = stream_worker
    w.submit("slow", "bundleScan", {"files": "slow/*.parquet", "functionId": "row_gate"},
             result_handler=upserts("main", "slow_t"), timeout_ms=20_000)
    # The earlier batches are written inside the task's open transaction before it ends.
    deadline = time.monotonic() + 18
    while _open_transactions(w.pg_dsn) == 0:
        assert time.monotonic() < deadline, "the streamed transaction never opened"
        time.sleep(0.1)
    res = w.wait_terminal("slow", timeout=60)
    assert res.state == 4 and res.failure_code == "TIMED_OUT", res
    assert not table_exists(w, "slow", "main", "slow_t")
    deadline = time.monotonic() + 10
    while _open_transactions(w.pg_dsn):                           # rolled back, connection back
        assert time.monotonic() < deadline, "the streamed transaction was left open"
        time.sleep(0.1)


def _peak_rss(pid: int) -> int:
    """The process's peak resident set so far (VmHWM): the kernel keeps the
    maximum, so no sampling instant can miss it."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


# Streamed or not: the memory test's property is about the streamed path; with
# False it measures the collected path, which it must refuse (that is how the
# test was checked to be able to fail).
MEMORY_TEST_STREAM = True


def test_memory_no_longer_grows_with_the_rows_of_the_task(start_worker, tmp_path, pg_db):
    """The same streamed rangeScan -> tableUpserts task, 50,000 then 200,000 rows,
    on one Worker: how far the Worker's peak RSS rises for the 150,000 extra
    rows. A collected task holds every output (a bytes object and its list slot,
    at the least) until its writer runs; a streamed one holds its bounded
    buffers whatever the rows. The bound is a quarter of that least per-row cost:
    the collected path (hundreds of bytes a row) is far past it, allocator noise
    (well under a MiB over 150,000 rows) far under it. The builder (rangeScan)
    and the target (PostgreSQL) keep no per-row state in the Worker's process."""
    small, big = 50_000, 200_000
    conf = tmp_path / "worker.json"
    # Buffers small enough that the small task fills them as the big one does.
    conf.write_text(json.dumps({"streamBuild": {"enabled": True, "batchMaxRows": BATCH_ROWS},
                                "writerStream": {"writeBytes": 4096, "bufferBytes": 256 << 10}}))
    env = {"STATE_DIR": str(tmp_path / "state"), "WORKER_CONFIG": str(conf), "CALL_DEADLINE_MS": "120000",
           "BLOCKX_DATA_SOURCES": json.dumps({"main": pg_db})}
    w = start_worker(env, profile="dev")       # the profile that has rangeScan
    # A collected task's result is past gRPC's default 4 MiB: read it on a channel that takes it.
    ch = grpc.intercept_channel(
        grpc.insecure_channel(f"127.0.0.1:{w.port}", options=[("grpc.max_receive_message_length", 64 << 20)]),
        auth._Bearer(auth.HARNESS_TOKEN))
    stub = pb_grpc.WorkerServiceStub(ch)
    peaks = {}
    try:
        # warm: the executors, the pool and the writer's path; small: the streamed
        # buffers at their bound; big: what the extra rows add.
        for name, rows in (("warm", 2_000), ("small", small), ("big", big)):
            w.submit(name, "rangeScan", {"functionId": "row_of", "start": 0, "stop": rows},
                     result_handler=upserts("main", name, stream=MEMORY_TEST_STREAM), timeout_ms=600_000)
            res = next(u.result for u in stub.WatchTasks(pb.WatchTasksRequest(task_ids=[name]), timeout=660)
                       if u.is_terminal)
            assert res.state == 3, res.failure_message
            assert res.outputs_written == (rows if MEMORY_TEST_STREAM else 0)      # which path ran
            peaks[name] = _peak_rss(w.proc.pid)
    finally:
        ch.close()
    assert sql(w, "big", "main", "SELECT count(*) AS n, sum(v) AS s FROM big") == [
        {"n": big, "s": sum((i + 100) * 2 for i in range(big))}]
    per_row = (peaks["big"] - peaks["small"]) / (big - small)
    held = sys.getsizeof(orjson.dumps({"id": big - 1, "v": (big - 1 + 100) * 2})) + 8
    assert per_row < held / 4, (f"the Worker's peak RSS rose {per_row:.1f} bytes a row from {small} to {big} "
                                f"rows (bound {held / 4:.1f}: a quarter of the {held} bytes a collected "
                                f"output holds at the least); peaks {peaks}")
