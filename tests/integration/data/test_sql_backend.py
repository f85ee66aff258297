"""The `sql` IO backend: read-only, per-source admission, timeout and row cap."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest

from blockx.plugins.io.errors import IOBackendError
from blockx.plugins.io.sql import SqlBackend


def req(**kw) -> bytes:
    return orjson.dumps({"source": "main", **kw})


async def test_rows_come_back_as_json_objects(db, table):
    await db.exec(f"CREATE TABLE {table} AS SELECT i AS id, 'n' || i AS name FROM generate_series(1, 5) AS g(i)")
    be = SqlBackend(db.plane)
    out, body = await be.request(req(query=f"SELECT id, name FROM {table} WHERE id > $1 ORDER BY id", params=[3]),
                                 None)
    assert body is None
    assert orjson.loads(out) == {"columns": ["id", "name"], "rowCount": 2,
                                 "rows": [{"id": 4, "name": "n4"}, {"id": 5, "name": "n5"}]}


async def test_large_results_are_refused_past_the_cap(db, table):
    await db.exec(f"CREATE TABLE {table} AS SELECT i AS id FROM generate_series(1, 11) AS g(i)")
    be = SqlBackend(db.plane, max_rows=10)
    assert orjson.loads((await be.request(req(query=f"SELECT id FROM {table} LIMIT 10"), None))[0])["rowCount"] == 10
    with pytest.raises(IOBackendError, match="more than 10 rows"):
        await be.request(req(query=f"SELECT id FROM {table}"), None)


@pytest.mark.parametrize("kw,needle", [
    ({"source": "nope", "query": "SELECT 1"}, "unknown data source 'nope'"),
    ({"query": "SELEC 1"}, "syntax error"),
    ({"query": "SELECT 1", "dsn": "x"}, "unknown request key(s) 'dsn'"),
    ({"query": "SELECT 1", "params": [[1]]}, "params must be an array of scalars"),
])
async def test_bad_requests(db, kw, needle):
    with pytest.raises(IOBackendError) as ei:
        await SqlBackend(db.plane).request(req(**kw), None)
    assert needle in ei.value.message
    assert not ei.value.retryable


async def test_writes_are_refused(db, table):
    await db.exec(f"CREATE TABLE {table} (id BIGINT)")
    with pytest.raises(IOBackendError) as ei:
        await SqlBackend(db.plane).request(req(query=f"DELETE FROM {table} RETURNING id"), None)
    assert "read-only" in ei.value.message


async def test_timeout_and_per_source_admission(db):
    if db.kind != "postgresql":
        pytest.skip("pg_sleep")
    be = SqlBackend(db.plane, concurrency=1, timeout_ms=300)
    with pytest.raises(IOBackendError, match="longer than 300 ms") as ei:
        await be.request(req(query="SELECT pg_sleep(2)"), None)
    assert ei.value.retryable
    # concurrency 1: two 0.2 s queries take about 0.4 s, not 0.2 s
    be = SqlBackend(db.plane, concurrency=1, timeout_ms=5000)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await asyncio.gather(*(be.request(req(query="SELECT pg_sleep(0.2)", params=[]), None) for _ in range(2)))
    assert loop.time() - t0 >= 0.38


async def test_a_long_duckdb_query_times_out_and_is_interrupted(db):
    if db.kind != "duckdb":
        pytest.skip("the PostgreSQL timeout is covered above with pg_sleep")
    be = SqlBackend(db.plane, timeout_ms=200)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(IOBackendError, match="longer than 200 ms"):
        await be.request(req(query="SELECT count(*) FROM range(100000000000) a(i)"), None)
    out, _ = await be.request(req(query="SELECT 1 AS one"), None)
    assert orjson.loads(out)["rows"] == [{"one": 1}]
    assert loop.time() - t0 < 5
    # interrupted, not left running in its thread: the process stops burning CPU
    await asyncio.sleep(0.3)
    cpu0 = time.process_time()
    await asyncio.sleep(1.0)
    assert time.process_time() - cpu0 < 0.4


async def test_a_result_larger_than_the_byte_cap_is_refused_naming_the_setting(db, table):
    await db.exec(f"CREATE TABLE {table} AS SELECT i AS id, repeat('x', 1000) AS s FROM generate_series(1, 50) AS g(i)")
    be = SqlBackend(db.plane, max_result_bytes=20_000)
    small = orjson.loads((await be.request(req(query=f"SELECT id, s FROM {table} ORDER BY id LIMIT 15"), None))[0])
    assert small["rowCount"] == 15 and small["rows"][0] == {"id": 1, "s": "x" * 1000}
    with pytest.raises(IOBackendError) as ei:
        await be.request(req(query=f"SELECT id, s FROM {table}"), None)
    msg = str(ei.value)
    assert "larger than 20000 bytes as JSON (ioBackends.sql.maxResultBytes, SQL_IO_MAX_RESULT_BYTES)" in msg, msg
    assert not ei.value.retryable


async def test_the_result_is_the_canonical_json_of_the_rows(db, table):
    await db.exec(f"CREATE TABLE {table} AS SELECT i AS id, 'n' || i AS b, i * 2 AS a FROM generate_series(1, 3) AS g(i)")
    out, _ = await SqlBackend(db.plane).request(req(query=f"SELECT id, b, a FROM {table} ORDER BY id"), None)
    rows = [{"a": 2 * i, "b": f"n{i}", "id": i} for i in (1, 2, 3)]
    assert out == orjson.dumps({"columns": ["id", "b", "a"], "rowCount": 3, "rows": rows}, option=orjson.OPT_SORT_KEYS)
    out, _ = await SqlBackend(db.plane).request(req(query=f"SELECT id FROM {table} WHERE id > 9"), None)
    assert out == b'{"columns":["id"],"rowCount":0,"rows":[]}'
