"""Named sources: opened by name, read-only scans in query order, bad SQL with the
database's own message, unknown names listing the configured ones."""

from __future__ import annotations

import pytest

from blockx.plugins.data.errors import DataSourceError, UnknownDataSource
from blockx.plugins.data.plane import DataPlane, default_sources


async def test_scan_returns_rows_in_query_order_in_batches(db, table):
    await db.exec(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, x BIGINT)")
    await db.exec(f"INSERT INTO {table} SELECT i, i % 7 FROM generate_series(1, 2500) AS g(i)")
    scan = await db.source.open_scan(f"SELECT id, x FROM {table} WHERE x > $1 ORDER BY id DESC", [3])
    assert scan.columns == ("id", "x")
    got = []
    while True:
        rows = await scan.fetch(400)
        if not rows:
            break
        assert len(rows) <= 400
        got.extend(rows)
    await scan.aclose()
    want = [(i, i % 7) for i in range(2500, 0, -1) if i % 7 > 3]
    assert got == want


@pytest.mark.parametrize("query,needle", [
    ("SELEC 1", "syntax error"),
    ("SELECT nope FROM nowhere_at_all", "nowhere_at_all"),
])
async def test_bad_sql_fails_with_the_database_message(db, query, needle):
    with pytest.raises(DataSourceError) as ei:
        await db.source.open_scan(query, [])
    assert needle in ei.value.message
    assert ei.value.message.startswith("DuckDB:" if db.kind == "duckdb" else "PostgreSQL:")


async def test_writes_and_second_statements_are_refused(db, table):
    await db.exec(f"CREATE TABLE {table} (id BIGINT)")
    for query in (f"INSERT INTO {table} VALUES (1)", f"DELETE FROM {table}",
                  f"SELECT 1; INSERT INTO {table} VALUES (2)"):
        with pytest.raises(DataSourceError) as ei:
            scan = await db.source.open_scan(query, [])
            await scan.fetch(10)
        msg = ei.value.message
        assert ("read-only" in msg or "only one statement" in msg or "multiple commands" in msg
                or "only a plain read-only query" in msg), msg
    assert await db.rows(f"SELECT count(*) FROM {table}") == [(0,)]


async def test_a_closed_scan_releases_its_connection(db, table):
    if db.kind != "postgresql":
        pytest.skip("connection accounting is PostgreSQL's")
    await db.exec(f"CREATE TABLE {table} AS SELECT i AS id FROM generate_series(1, 10000) AS g(i)")
    scan = await db.source.open_scan(f"SELECT id FROM {table}", [])
    assert len(await scan.fetch(10)) == 10
    assert await db.pg_activity() == 1          # the open read-only transaction
    await scan.aclose()
    assert await db.pg_activity() == 0
    pool = await db.source.pool()
    assert pool.get_idle_size() == pool.get_size()


def test_unknown_source_lists_the_configured_names(tmp_path):
    plane = DataPlane({"main": "postgresql://u@db:5432/app", "local": f"duckdb://{tmp_path}/x.duckdb"})
    with pytest.raises(UnknownDataSource) as ei:
        plane.source("mian")
    assert str(ei.value) == "unknown data source 'mian' (configured: local, main)"
    assert "postgresql://" not in str(ei.value)


def test_default_source_is_a_local_duckdb_under_the_state_dir(tmp_path):
    assert default_sources(str(tmp_path)) == {"local": f"duckdb://{tmp_path}/local.duckdb"}
    plane = DataPlane(default_sources(str(tmp_path)))
    assert plane.names() == ["local"]
    assert not (tmp_path / "local.duckdb").exists()      # opened on first use only


async def test_duckdb_sources_cannot_read_the_workers_files(tmp_path):
    """Two layers: a file-reading function is refused by name before the query
    runs, and a file named as a table (no function to refuse) meets DuckDB's
    own external-access setting, off on every named source."""
    plane = DataPlane({"local": f"duckdb://{tmp_path}/x.duckdb"})
    try:
        with pytest.raises(DataSourceError, match="refused the function read_csv"):
            await plane.source("local").open_scan("SELECT * FROM read_csv('/etc/passwd')", [])
        with pytest.raises(DataSourceError, match="disabled by configuration"):
            await plane.source("local").open_scan("SELECT * FROM '/etc/passwd.csv'", [])
    finally:
        await plane.aclose()


def test_bundle_paths_stay_under_the_root(tmp_path):
    plane = DataPlane({}, bundle_root=str(tmp_path))
    assert plane.bundle_path("data/a.parquet") == str(tmp_path.resolve() / "data" / "a.parquet")
    for bad in ("../x.parquet", "/etc/passwd", "data/../../x"):
        with pytest.raises(DataSourceError):
            plane.bundle_path(bad)
