"""phaseIoTimeoutMs end to end: it bounds each IO operation of the writer (a
statement), not the Plugin phase, whose whole is bounded by the task deadline;
a transient database failure leaves the task retryable. A real worker with real
executors and a real PostgreSQL."""
from __future__ import annotations

import asyncio
import json
import time

import asyncpg
import pytest

pytestmark = pytest.mark.e2e

IO_TIMEOUT_MS = 1000
OPTIONAL = [f"c{j}" for j in range(10)]


def _run(dsn, sql, *args):
    async def go():
        conn = await asyncpg.connect(dsn)
        try:
            return await conn.fetch(sql, *args)
        finally:
            await conn.close()
    return asyncio.run(go())


def _upsert(table):
    return ("tableUpserts", {"target": "main", "table": table, "key": ["id"]})


def test_a_healthy_upsert_longer_than_phase_io_timeout_succeeds(start_worker, pg_db, tmp_path):
    # 1,000 rows with 1,000 different sets of fields: 1,000 groups, each a few
    # short statements, so the writer runs well past phaseIoTimeoutMs in all
    # while no statement comes near it.
    cols = ", ".join(f"{c} BIGINT" for c in OPTIONAL)
    _run(pg_db, f"CREATE TABLE wide (id BIGINT PRIMARY KEY, {cols})")
    w = start_worker({"PHASE_IO_TIMEOUT_MS": str(IO_TIMEOUT_MS), "STATE_DIR": str(tmp_path / "state"),
                      "BLOCKX_DATA_SOURCES": json.dumps({"main": pg_db})}, profile="bundle")
    rows = [dict({"id": i}, **{c: i for j, c in enumerate(OPTIONAL) if i >> j & 1}) for i in range(1000)]
    w.submit_calls("wide-1", [("echo", [rows])], result_handler=_upsert("wide"))
    t0 = time.monotonic()
    res = w.wait_terminal("wide-1", timeout=120)
    elapsed = time.monotonic() - t0
    assert res.state == 3, (res.failure_code, res.failure_message)      # SUCCEEDED
    assert json.loads(res.plugin_results[0].details)["rows"] == 1000
    assert res.statistic.plugin_ms > IO_TIMEOUT_MS, (res.statistic.plugin_ms, elapsed)
    assert _run(pg_db, "SELECT count(*), sum(c9) FROM wide")[0] == (1000, sum(i for i in range(1000) if i >> 9 & 1))


def test_a_statement_past_phase_io_timeout_fails_the_task_retryable(start_worker, pg_db, tmp_path):
    _run(pg_db, "CREATE TABLE locked (id BIGINT PRIMARY KEY, name TEXT)")
    w = start_worker({"PHASE_IO_TIMEOUT_MS": "500", "STATE_DIR": str(tmp_path / "state"),
                      "BLOCKX_DATA_SOURCES": json.dumps({"main": pg_db})}, profile="bundle")

    async def hold_and_submit():
        holder = await asyncpg.connect(pg_db)
        try:
            tr = holder.transaction()
            await tr.start()
            await holder.execute("LOCK TABLE locked IN ACCESS EXCLUSIVE MODE")
            w.submit_calls("locked-1", [("echo", [{"id": 1, "name": "a"}])], result_handler=_upsert("locked"))
            res = await asyncio.to_thread(w.wait_terminal, "locked-1", 60)
            await tr.rollback()
            return res
        finally:
            await holder.close()

    res = asyncio.run(hold_and_submit())
    assert res.state == 4 and res.failure_code == "PLUGIN_FAILED", res      # FAILED
    assert res.retryable is True
    assert "canceling statement due to statement timeout" in res.failure_message
