"""dbscan and bundleScan streams against real databases and real files."""

from __future__ import annotations

import asyncio
import os

import duckdb
import orjson
import pytest

from blockx.plugins.builder_api import BuilderError
from blockx.plugins.builders.bundle_scan import BundleScanBuilder
from blockx.plugins.builders.db_scan import DbScanBuilder
from blockx.plugins.data.errors import DataSourceError
from blockx.plugins.data.plane import DataPlane


def payload(**kw) -> bytes:
    return orjson.dumps({"source": "main", "functionId": "f", **kw})


async def drain(stream, rows=100, nbytes=1 << 20):
    out = []
    async for batch in stream.abatches(rows, nbytes):
        assert 0 < len(batch) <= rows
        out.extend(batch)
    return out


async def test_dbscan_makes_one_call_per_row_in_query_order(db, table):
    await db.exec(f"CREATE TABLE {table} (id BIGINT, x BIGINT, s TEXT)")
    await db.exec(f"INSERT INTO {table} SELECT i, i * 3, 'r' || i FROM generate_series(1, 1234) AS g(i)")
    b = DbScanBuilder(db.plane)
    stream = await b.open_stream(payload(query=f"SELECT id, x, s FROM {table} WHERE x > $1 ORDER BY id DESC",
                                         params=[30]))
    calls = await drain(stream)
    assert [c.function_id for c in calls[:2]] == ["f", "f"]
    assert [orjson.loads(c.args_json) for c in calls] == [[{"id": i, "s": f"r{i}", "x": 3 * i}]
                                                          for i in range(1234, 10, -1)]
    assert stream.closed
    stream = await b.open_stream(payload(query=f"SELECT id, s FROM {table} ORDER BY id LIMIT 2",
                                         args="columns"))
    assert [c.args_json for c in await drain(stream)] == [b'[1,"r1"]', b'[2,"r2"]']


async def test_dbscan_batches_respect_the_byte_bound(db, table):
    await db.exec(f"CREATE TABLE {table} AS SELECT i AS id FROM generate_series(1, 50) AS g(i)")
    stream = await DbScanBuilder(db.plane).open_stream(payload(query=f"SELECT id FROM {table} ORDER BY id",
                                                               args="columns"))
    batches = [b async for b in stream.abatches(1000, 20)]
    assert all(sum(len(c.args_json) for c in b) <= 20 for b in batches)
    assert sum(len(b) for b in batches) == 50


@pytest.mark.parametrize("kw,needle", [
    ({"source": "nope", "query": "SELECT 1"}, "unknown data source 'nope' (configured: main)"),
    ({"query": "SELEC 1"}, "syntax error"),
    ({"query": "SELECT 1", "params": [{"a": 1}]}, "params must be an array of scalars"),
    ({"query": "SELECT 1", "args": "tuple"}, 'args must be "row" or "columns"'),
    ({"query": ""}, "query must be a non-empty string"),
    ({"query": "SELECT 1", "dsn": "postgresql://x"}, "unknown payload key(s) 'dsn'"),
])
async def test_dbscan_bad_payloads_fail_in_the_builder(db, kw, needle):
    with pytest.raises(BuilderError) as ei:
        await DbScanBuilder(db.plane).open_stream(payload(**kw))
    assert needle in str(ei.value)


async def test_dbscan_refuses_writes(db, table):
    await db.exec(f"CREATE TABLE {table} (id BIGINT)")
    with pytest.raises(BuilderError) as ei:
        stream = await DbScanBuilder(db.plane).open_stream(payload(query=f"INSERT INTO {table} VALUES (1) RETURNING id"))
        await drain(stream)
    assert "read-only" in str(ei.value)
    assert await db.rows(f"SELECT count(*) FROM {table}") == [(0,)]


async def test_dbscan_close_mid_stream_stops_the_cursor(db, table):
    await db.exec(f"CREATE TABLE {table} AS SELECT i AS id FROM generate_series(1, 100000) AS g(i)")
    stream = await DbScanBuilder(db.plane).open_stream(payload(query=f"SELECT id FROM {table} ORDER BY id"))
    gen = stream.abatches(100, 1 << 20)
    first = await gen.__anext__()
    assert len(first) == 100
    await stream.aclose()
    assert stream.rows < 100000
    if db.kind == "postgresql":
        assert await db.pg_activity() == 0


# --- bundleScan ------------------------------------------------------------------------


async def write_bundle(db, tmp_path):
    root = tmp_path / "bundles" / "data"
    root.mkdir(parents=True)
    cur = duckdb.connect()           # the test's own DuckDB: the plane's may open no file it did not resolve
    for day, lo in (("01", 0), ("02", 100)):
        cur.execute(f"COPY (SELECT i AS id, i * 2 AS x FROM range({lo}, {lo} + 100) t(i)) "
                    f"TO '{root}/2026-11-{day}.parquet' (FORMAT PARQUET)")
    cur.execute(f"COPY (SELECT 1 AS id) TO '{root}/other.csv' (HEADER)")
    cur.close()


async def test_bundle_scan_per_row_reads_files_in_name_order(db, tmp_path):
    await write_bundle(db, tmp_path)
    b = BundleScanBuilder(db.plane)
    stream = await b.open_stream(orjson.dumps({"files": "data/2026-11-*.parquet", "functionId": "f"}))
    calls = await drain(stream, rows=64)
    assert [orjson.loads(c.args_json)[0] for c in calls] == [{"id": i, "x": 2 * i} for i in range(200)]
    stream = await b.open_stream(orjson.dumps({"files": ["data/2026-11-02.parquet"], "functionId": "f",
                                               "columns": ["x"], "args": "columns"}))
    assert (await drain(stream))[0].args_json == b"[200]"


async def test_bundle_scan_per_file(db, tmp_path):
    await write_bundle(db, tmp_path)
    stream = await BundleScanBuilder(db.plane).open_stream(
        orjson.dumps({"files": "data/*", "functionId": "whole", "per": "file"}))
    assert [orjson.loads(c.args_json) for c in await drain(stream)] == [
        [{"path": "data/2026-11-01.parquet", "rows": 100}], [{"path": "data/2026-11-02.parquet", "rows": 100}],
        [{"path": "data/other.csv", "rows": 1}]]


@pytest.mark.parametrize("kw,needle", [
    ({"files": "data/missing-*.parquet"}, "no file matches 'data/missing-*.parquet'"),
    ({"files": "../etc/*.parquet"}, "leaves the bundle root"),
    ({"files": "/etc/passwd"}, "must be relative to the bundle root"),
    ({"files": "data/*"}, "all Parquet or all CSV"),
    ({"files": "data/*.parquet", "columns": ["nope"]}, "nope"),
    ({"files": "data/*.parquet", "per": "all"}, 'per must be "row" or "file"'),
    ({}, "files is missing"),
])
async def test_bundle_scan_failures(db, tmp_path, kw, needle):
    await write_bundle(db, tmp_path)
    with pytest.raises(BuilderError) as ei:
        await BundleScanBuilder(db.plane).open_stream(orjson.dumps({"functionId": "f", **kw}))
    assert needle in str(ei.value)


async def test_dbscan_refuses_a_row_larger_than_the_row_cap(db, table):
    await db.exec(f"CREATE TABLE {table} AS SELECT i AS id, repeat('x', i * 100) AS s FROM generate_series(1, 30) AS g(i)")
    db.plane.scan_max_row_bytes = 2_000
    stream = await DbScanBuilder(db.plane).open_stream(payload(query=f"SELECT id, s FROM {table} ORDER BY id"))
    with pytest.raises(BuilderError) as ei:
        await drain(stream)
    msg = str(ei.value)
    assert "dbscan: row 19 is 2018 bytes as call arguments, more than dataPlane.scanMaxRowBytes (2000, " \
           "SCAN_MAX_ROW_BYTES)" in msg, msg
    await stream.aclose()


async def test_bundle_scan_stops_globbing_at_the_file_cap(db, tmp_path):
    await write_bundle(db, tmp_path)
    db.plane.bundle_max_files = 2
    b = BundleScanBuilder(db.plane)
    with pytest.raises(BuilderError) as ei:
        await b.open_stream(orjson.dumps({"files": "data/*", "functionId": "f", "per": "file"}))
    assert "match more than 2 entries (dataPlane.bundleMaxFiles, BUNDLE_MAX_FILES)" in str(ei.value)
    stream = await b.open_stream(orjson.dumps({"files": "data/2026-11-*.parquet", "functionId": "f"}))
    assert len(await drain(stream)) == 200


async def test_bundle_scan_globs_off_the_event_loop(db, tmp_path):
    """The glob runs in a worker thread: the loop keeps running other tasks while
    it does (here, even when the glob ends in a failure)."""
    await write_bundle(db, tmp_path)
    ticks = 0
    stop = False

    async def ticker():
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0)
    t = asyncio.get_running_loop().create_task(ticker())
    await asyncio.sleep(0)
    before = ticks
    try:
        with pytest.raises(BuilderError, match="no file matches"):
            await BundleScanBuilder(db.plane).open_stream(orjson.dumps({"files": "data/none-*", "functionId": "f"}))
        assert ticks > before, "the loop did not run while bundleScan globbed"
    finally:
        stop = True
        await t


async def test_bundle_scan_refuses_a_link_out_of_the_root(db, tmp_path):
    await write_bundle(db, tmp_path)
    outside = tmp_path / "outside.csv"
    outside.write_text("secret\nhunter2\n")
    os.symlink(outside, tmp_path / "bundles" / "data" / "link.csv")
    with pytest.raises(BuilderError) as ei:
        await BundleScanBuilder(db.plane).open_stream(orjson.dumps({"files": "data/*.csv", "functionId": "f"}))
    assert "'data/link.csv' resolves outside the bundle root" in str(ei.value)


async def test_the_bundle_duckdb_opens_only_the_files_it_was_given(tmp_path):
    allowed, other = tmp_path / "a.csv", tmp_path / "secret.txt"
    allowed.write_text("id\n1\n")
    other.write_text("hunter2")
    plane = DataPlane({})
    src = plane.files([str(allowed)])
    try:
        cols, rows = await src.fetch_rows(f"SELECT * FROM read_csv_auto('{allowed}')", [], 10)
        assert rows == [(1,)]
        for q in (f"SELECT content FROM read_text('{other}')", f"SELECT * FROM glob('{tmp_path}/*')",
                  f"SELECT * FROM read_csv_auto('{tmp_path}/*.txt')"):
            with pytest.raises(DataSourceError, match="disabled by configuration"):
                await src.fetch_rows(q, [], 10)
        cur = src.cursor()
        for stmt in ("SET enable_external_access = true", f"SET allowed_paths = ['{other}']"):
            with pytest.raises(duckdb.Error, match="locked"):
                cur.execute(stmt)
        cur.close()
    finally:
        src.close()
        await plane.aclose()
