"""A DuckDB table that an upsert creates (createTable, the table missing when the
writer opened) is built aside: under a staging name, each write committed there
on its own, and renamed to the table by the one transaction of the task's
commit. Nothing is visible under the table's name before that commit, an abort
drops the staging table, and a Worker killed mid-write leaves one that the
source drops when it next opens the file. The point is memory: one transaction
adding N new keys holds their index twice at COMMIT; built aside, each write
merges its keys as it commits (see bench/duckdb_commit_memory.py)."""

from __future__ import annotations

import asyncio
import logging
import random
import subprocess
import sys
import textwrap

import orjson
import pytest

from blockx.plugins.data.duck import STAGING_PREFIX, DuckSource
from blockx.plugins.data.errors import DataSourceError
from blockx.plugins.writers.table_upserts import TableUpsertsPlugin
from tests.support.duck import duck_rows as _rows

COLS = [("id", "BIGINT"), ("v", "BIGINT")]


def _tables(src: DuckSource) -> list[str]:
    cur = src.cursor()
    try:
        return sorted(f"{s}.{t}" for s, t in cur.execute(
            "SELECT schema_name, table_name FROM duckdb_tables()").fetchall())
    finally:
        cur.close()


@pytest.fixture
def src(tmp_path):
    """A DuckDB file source of its own, closed after the test."""
    s = DuckSource("local", str(tmp_path / "a.duckdb"))
    yield s
    s.close()


def _staging(src: DuckSource) -> list[str]:
    return [t for t in _tables(src) if t.split(".", 1)[1].startswith(STAGING_PREFIX)]


async def test_a_new_table_is_built_aside_and_appears_at_commit(src):
    tx = src.open_upsert(None, "t", ["id"], create=COLS)
    assert await tx.write([(("id", "v"), [[1, 2, 3], [10, 20, 30]])]) == 3
    assert await tx.write([(("id", "v"), [[3, 4], [31, 40]])]) == 2
    assert _tables(src) == _staging(src) and len(_staging(src)) == 1    # no `t` before the commit
    await tx.commit()
    assert _tables(src) == ["main.t"]
    assert _rows(src, "SELECT id, v FROM t ORDER BY id") == [(1, 10), (2, 20), (3, 31), (4, 40)]
    # The primary key came with the rename: an upsert over it keeps one row a key.
    assert await src.upsert(None, "t", ["id"], [(("id", "v"), [[4, 5], [41, 50]])]) == 2
    assert _rows(src, "SELECT id, v FROM t WHERE id >= 4 ORDER BY id") == [(4, 41), (5, 50)]
    with pytest.raises(Exception, match="(?i)constraint|duplicate"):
        _rows(src, "INSERT INTO t VALUES (1, 0)")


async def test_a_new_table_in_a_schema_is_built_in_that_schema(src):
    _rows(src, "CREATE SCHEMA app")
    tx = src.open_upsert("app", "t", ["id"], create=COLS)
    await tx.write([(("id", "v"), [[1], [1]])])
    assert [t.split(".")[0] for t in _staging(src)] == ["app"]
    await tx.commit()
    assert _tables(src) == ["app.t"]


async def test_a_rolled_back_new_table_leaves_nothing(src):
    tx = src.open_upsert(None, "t", ["id"], create=COLS)
    await tx.write([(("id", "v"), [[1, 2], [1, 2]])])
    await tx.rollback()
    assert _tables(src) == []
    await tx.rollback()                      # twice: nothing more


async def test_a_failed_write_drops_the_staging_table(src):
    tx = src.open_upsert(None, "t", ["id"], create=COLS)
    await tx.write([(("id", "v"), [[1, 2], [1, 2]])])
    with pytest.raises(DataSourceError):
        await tx.write([(("id", "nope"), [[3], [3]])])
    assert _tables(src) == []
    with pytest.raises(DataSourceError, match="already rolled back"):
        await tx.commit()


async def test_a_commit_that_fails_drops_the_staging_table(src):
    # A view took the table's name meanwhile: the rename fails, the task writes
    # nothing, and its staging table goes (a cancel that lands in the commit ends
    # the same way; test_a_cancelled_writer_of_a_new_table_leaves_nothing found it).
    tx = src.open_upsert(None, "t", ["id"], create=COLS)
    await tx.write([(("id", "v"), [[1, 2], [1, 2]])])
    _rows(src, "CREATE VIEW t AS SELECT 1 AS id")
    with pytest.raises(DataSourceError):
        await tx.commit()
    await tx.rollback()
    assert _tables(src) == [], "the failed commit left its staging table"


async def test_a_table_created_meanwhile_is_merged_into_at_commit(src):
    # Two tasks create the same missing table: the first to commit renames its
    # staging table, the second merges into it in its commit (its rows win where
    # the keys meet, as if its one transaction had committed second).
    a = src.open_upsert(None, "t", ["id"], create=COLS)
    b = src.open_upsert(None, "t", ["id"], create=COLS)
    await a.write([(("id", "v"), [[1, 2, 3], [1, 2, 3]])])
    await b.write([(("id", "v"), [[3, 4], [-3, -4]])])
    await b.commit()
    await a.commit()
    assert _rows(src, "SELECT id, v FROM t ORDER BY id") == [(1, 1), (2, 2), (3, 3), (4, -4)]
    assert _tables(src) == ["main.t"]


async def test_a_staging_table_left_by_a_killed_worker_is_dropped_at_open(tmp_path, caplog):
    path = str(tmp_path / "a.duckdb")
    child = textwrap.dedent(f"""
        import asyncio, os
        from blockx.plugins.data.duck import DuckSource
        async def main():
            src = DuckSource("local", {path!r})
            tx = src.open_upsert(None, "t", ["id"], create={COLS!r})
            await tx.write([(("id", "v"), [list(range(1000)), list(range(1000))])])
            print("written", flush=True)
            os._exit(9)                  # killed mid-task: no rollback, no close
        asyncio.run(main())
        """)
    run = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert "written" in run.stdout, run.stderr
    src = DuckSource("local", path)
    try:
        with caplog.at_level(logging.INFO, logger="blockx.data"):
            assert _tables(src) == []
        events = [r for r in caplog.records if getattr(r, "event", "") == "data_source_staging_dropped"]
        assert len(events) == 1 and events[0].fields["tables"] == 1, caplog.records
    finally:
        src.close()


async def test_a_reopen_spares_the_staging_table_of_a_live_writer_and_fails_it_cleanly(src):
    # A source reopened under a writer (drop_invalidated, after another task's
    # failed commit) keeps the writer's staging table; the writer's cursor is
    # gone with the old instance, so its next write fails, and its rollback
    # drops the table on a new cursor.
    tx = src.open_upsert(None, "t", ["id"], create=COLS)
    await tx.write([(("id", "v"), [[1], [1]])])
    src.close()
    assert len(_staging(src)) == 1            # reopened: spared, its writer is live
    with pytest.raises(DataSourceError):
        await tx.write([(("id", "v"), [[2], [2]])])
    await tx.rollback()
    assert _tables(src) == []


async def test_a_new_table_past_what_one_transaction_holds_commits(tmp_path):
    # 1.5M new keys at 24 MiB: in one transaction every write fits and the COMMIT
    # does not (test_upsert_memory_limit.py); built aside, it commits.
    src = DuckSource("local", str(tmp_path / "a.duckdb"), memory_limit_mb=24)
    try:
        tx = src.open_upsert(None, "t", ["id"], create=COLS)
        for j in range(0, 1_500_000, 100_000):
            ids = list(range(j, j + 100_000))
            await tx.write([(("id", "v"), [ids, ids])])
        await tx.commit()
        assert _rows(src, "SELECT count(*), min(id), max(id) FROM t") == [(1_500_000, 0, 1_499_999)]
    finally:
        src.close()


async def test_a_cancelled_writer_of_a_new_table_leaves_nothing(src):
    """Cancels at random instants of a createTable write (inside a statement, between
    two, in the commit): either no table and no staging table, or every row."""
    plane = type("Plane", (), {"source": lambda self, name, role="": src})()
    w = TableUpsertsPlugin(plane)
    rng = random.Random(11)
    loop = asyncio.get_running_loop()
    # The first row has every column (createTable types the table from it).
    outputs = [orjson.dumps({"id": i, **{f"v{j}": i for j in range(6) if i >> j & 1}}) for i in reversed(range(64))]
    cfg0 = orjson.dumps({"target": "local", "table": "probe", "key": ["id"], "createTable": True})
    t0 = loop.time()
    assert (await w.execute(cfg0, outputs)).ok
    span = loop.time() - t0
    cancelled = 0
    for trial in range(30):
        table = f"t{trial}"
        cfg = orjson.dumps({"target": "local", "table": table, "key": ["id"], "createTable": True})
        task = loop.create_task(w.execute(cfg, outputs))
        await asyncio.sleep(rng.uniform(0.0, span))
        task.cancel()
        try:
            r = await task
        except asyncio.CancelledError:
            cancelled += 1
            assert f"main.{table}" not in _tables(src), f"trial {trial}: a cancelled writer made its table"
        else:
            assert r.ok, r.message
            assert _rows(src, f"SELECT count(*) FROM {table}") == [(64,)]
        assert _staging(src) == [], f"trial {trial}: a staging table was left"
    assert cancelled >= 5, "too few cancels landed while writing to show anything"
