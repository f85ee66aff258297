"""A tableUpserts writer cancelled mid-write (its task was cancelled or timed
out) writes nothing, whichever instant the cancel lands on: inside a
statement, or between two of them (where DuckDB's interrupt alone is lost and
the COMMIT would go through). Only a cancel that comes once the COMMIT was
sent cannot undo it: the writer then reports the write as done, never as
cancelled."""
from __future__ import annotations

import asyncio
import random

import asyncpg
import orjson
import pytest

from blockx.plugins.writers.table_upserts import TableUpsertsPlugin


async def test_a_cancelled_upsert_never_commits(db, table):
    cols = ", ".join(f"v{j} BIGINT" for j in range(8))
    await db.exec(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, {cols})")
    w = TableUpsertsPlugin(db.plane)
    cfg = orjson.dumps({"target": "main", "table": table, "key": ["id"]})
    rng = random.Random(7)
    cancelled = 0
    # Rows with different column sets make one group (five statements) each: 32 groups.
    outputs = lambda trial: [orjson.dumps({"id": trial * 1000 + i, **{f"v{j}": i for j in range(8) if i >> j & 1}})  # noqa: E731
                             for i in range(32)]
    loop = asyncio.get_running_loop()
    assert (await w.execute(cfg, outputs(998))).ok     # the pool is open: not part of the span
    t0 = loop.time()
    r = await w.execute(cfg, outputs(999))            # how long a whole write takes here
    span = loop.time() - t0
    assert r.ok, r.message
    for trial in range(30):
        task = loop.create_task(w.execute(cfg, outputs(trial)))
        await asyncio.sleep(rng.uniform(0.0, span))
        task.cancel()
        n = lambda: db.rows(f"SELECT count(*) FROM {table} WHERE id >= {trial * 1000} AND id < {trial * 1000 + 1000}")  # noqa: E731
        try:
            r = await task
        except asyncio.CancelledError:
            cancelled += 1
            assert (await n())[0][0] == 0, f"trial {trial}: a cancelled writer committed rows"
        else:
            assert r.ok, r.message
            assert (await n())[0][0] == 32, f"trial {trial}: a writer that reported its write lost rows"
    assert cancelled >= 5, "too few cancels landed while writing to show anything"


async def test_a_cancel_once_the_commit_went_through_reports_the_write_done(request, tmp_path, table):
    """The instant the random cancels above only sometimes hit: PostgreSQL has
    committed, and the connection is on its way back to the pool (a reset query
    on the server). A cancel then cannot undo the write, so commit() must not
    end cancelled, or a writer whose rows are in the table says it wrote none."""
    from blockx.plugins.data.plane import DataPlane

    pg = request.getfixturevalue("postgres_server")
    plane = DataPlane({"main": pg.dsn}, bundle_root=str(tmp_path / "bundles"), statement_timeout_ms=5000)
    try:
        source = plane.source("main")
        conn = await asyncpg.connect(pg.dsn)
        try:
            await conn.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v BIGINT)")
            tx = source.open_upsert(None, table, ["id"], types={"id": "bigint", "v": "bigint"})
            await tx.write([(("id", "v"), [list(range(32)), list(range(32))])])
            loop = asyncio.get_running_loop()
            commit = loop.create_task(tx.commit())
            while tx.state != "committed":          # step the loop until the COMMIT has gone through
                assert not commit.done(), "commit() ended without committing"
                await asyncio.sleep(0)
            assert not commit.done(), "the connection went back to the pool without a wait"
            commit.cancel()
            await commit                            # the write is done: no CancelledError
            assert await conn.fetchval(f"SELECT count(*) FROM {table}") == 32
            assert tx.state == "committed"
        finally:
            await conn.close()
    finally:
        await plane.aclose()
