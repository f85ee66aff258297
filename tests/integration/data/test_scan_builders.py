"""dbscan and bundleScan streams against real databases and real files."""

from __future__ import annotations

import orjson
import pytest

from blockx.plugins.builder_api import BuilderError
from blockx.plugins.builders.bundle_scan import BundleScanBuilder
from blockx.plugins.builders.db_scan import DbScanBuilder


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
    cur = db.plane.files.cursor()
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
