"""A one-transaction DuckDB upsert (into a table that exists; one the task creates
is built aside, test_duck_staged_table.py) past what dataPlane.duckdbMemoryLimitMb
holds fails naming that setting: DuckDB keeps the transaction's primary-key index
in its buffer pool when it commits, and its own message (SET memory_limit=...)
names a statement no task can run on a locked source."""

from __future__ import annotations

import pytest

from blockx.plugins.data.duck import DuckSource
from blockx.plugins.data.errors import DataSourceError
from tests.support.duck import duck_rows as _sql


async def test_an_upsert_past_the_memory_limit_names_the_setting(tmp_path):
    src = DuckSource("local", str(tmp_path / "a.duckdb"), memory_limit_mb=16)
    try:
        _sql(src, "CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT)")
        tx = src.open_upsert(None, "t", ["id"])
        with pytest.raises(DataSourceError) as err:
            for j in range(0, 3_000_000, 100_000):
                ids = list(range(j, j + 100_000))
                await tx.write([(("id", "v"), [ids, ids])])
            await tx.commit()
        msg = err.value.message
        assert "dataPlane.duckdbMemoryLimitMb (16 MiB)" in msg and "primary-key index" in msg, msg
        assert "SET memory_limit" not in msg, msg
        await tx.rollback()
        assert _sql(src, "SELECT count(*) FROM t") == [(0,)]    # rolled back, and the source writes again
        assert await src.upsert(None, "u", ["id"], [(("id",), [[1, 2]])], create=[("id", "BIGINT")]) == 2
    finally:
        src.close()


async def test_a_commit_past_the_memory_limit_leaves_the_source_usable(tmp_path):
    # 1.5M new keys at 24 MiB: every write fits, the COMMIT does not (DuckDB pins
    # the transaction's key index and the table's beside it). DuckDB then marks
    # the whole database invalidated ("must be restarted"): without a reopen,
    # every later read and write of the source failed until the Worker restarted.
    path = str(tmp_path / "a.duckdb")
    src = DuckSource("local", path, memory_limit_mb=24)
    try:
        assert await src.upsert(None, "kept", ["id"], [(("id",), [[7, 8]])], create=[("id", "BIGINT")]) == 2
        _sql(src, "CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT)")
        tx = src.open_upsert(None, "t", ["id"])
        for j in range(0, 1_500_000, 100_000):
            ids = list(range(j, j + 100_000))
            await tx.write([(("id", "v"), [ids, ids])])
        with pytest.raises(DataSourceError) as err:
            await tx.commit()
        msg = err.value.message
        assert "dataPlane.duckdbMemoryLimitMb (24 MiB)" in msg and "1500000 rows" in msg, msg
        assert "invalidated" not in msg and "SET memory_limit" not in msg, msg
        await tx.rollback()
        cols, rows = await src.fetch_rows("SELECT count(*) FROM t", [], 1)
        assert rows == [(0,)]                # nothing of the failed task
        cols, rows = await src.fetch_rows("SELECT id FROM kept ORDER BY id", [], 10)
        assert rows == [(7,), (8,)]          # what was committed before is still there
        assert await src.upsert(None, "u", ["id"], [(("id",), [[1, 2]])], create=[("id", "BIGINT")]) == 2
    finally:
        src.close()
