"""dbscan and tableUpserts through the orchestrator (fake executors, real
databases): the Builder phase opens the scan, the Calls phase streams it under the
credit window, FAST_FAIL and the task deadline stop the cursor, and the writer
phase upserts the outputs."""
from __future__ import annotations

import asyncio
import uuid

import asyncpg
import orjson
import pytest

from blockx.core.types import FunctionCall, ResultHandler, SubmitTaskRequest, TaskState
from blockx.protocol import messages as m

from .harness import outputs, settle, until
from tests.support.failure_messages import doubled_prefix


@pytest.fixture(params=["duckdb", "postgresql"])
async def source_env(request, tmp_path):
    """(kind, url, env) of a fresh `main` source: a DuckDB file, or a new database
    in the session's PostgreSQL cluster."""
    if request.param == "duckdb":
        url = f"duckdb://{tmp_path}/main.duckdb"
    else:
        pg = request.getfixturevalue("postgres_server")
        name = "db_" + uuid.uuid4().hex[:12]
        conn = await asyncpg.connect(pg.dsn)
        try:
            await conn.execute(f"CREATE DATABASE {name}")
        finally:
            await conn.close()
        url = pg.dsn.rsplit("/", 1)[0] + "/" + name
    return request.param, url, {"BLOCKX_DATA_SOURCES": orjson.dumps({"main": url}).decode()}


async def sql(h, kind, url, query):
    if kind == "duckdb":
        cur = h.data.source("main").cursor()
        try:
            return cur.execute(query).fetchall()
        finally:
            cur.close()
    conn = await asyncpg.connect(url)
    try:
        return [tuple(r) for r in await conn.fetch(query)]
    finally:
        await conn.close()


async def open_cursors(h, kind, url) -> int:
    if kind == "duckdb":
        return 0
    r = await sql(h, kind, url, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'blockx-worker' "
                                "AND state <> 'idle'")
    return r[0][0]


def tweak(rows: int, window: int):
    def t(cfg):
        cfg.stream_build.batch_max_rows = rows
        cfg.stream_build.max_outstanding_batches = window
        cfg.data_plane.scan_fetch_rows = rows
    return t


def scan(h, task_id, query, *, handler=None, **kw):
    payload = orjson.dumps({"source": "main", "query": query, "functionId": "echo", "args": "columns"})
    return h.orch.submit_task(SubmitTaskRequest(task_id=task_id, function_call=FunctionCall("dbscan", payload),
                                                result_handler=handler, **kw))


async def test_calls_follow_query_order_and_outputs_are_upserted(make_harness, source_env):
    kind, url, env = source_env
    h = await make_harness(env={"STREAM_BUILD_ENABLED": "true", **env}, tweak=tweak(3, 2), capacity=64)
    await sql(h, kind, url, "CREATE TABLE src AS SELECT i AS id FROM generate_series(1, 10) AS g(i)")
    await sql(h, kind, url, "CREATE TABLE dst (id BIGINT PRIMARY KEY, sq BIGINT)")
    handler = ResultHandler("tableUpserts", orjson.dumps({"target": "main", "table": "dst", "key": ["id"]}))
    scan(h, "t", "SELECT id FROM src ORDER BY id DESC", handler=handler)
    f = h.fake
    done = 0
    while done < 10:
        sent = await h.executed(done + 1)
        for s in sent[done:]:
            (i,) = s.payload["args"]
            f.complete(s.call_id, {"id": i, "sq": i * i})
        done = len(sent)
    res = await h.terminal("t")
    assert res.state == TaskState.SUCCEEDED, res.result.failure_message
    assert [o["id"] for o in outputs(res)] == list(range(10, 0, -1))
    assert orjson.loads(res.result.plugin_results[0].details)["rows"] == 10
    assert await sql(h, kind, url, "SELECT id, sq FROM dst ORDER BY id") == [(i, i * i) for i in range(1, 11)]
    assert await open_cursors(h, kind, url) == 0


async def test_fast_fail_stops_the_cursor(make_harness, source_env):
    kind, url, env = source_env
    h = await make_harness(env={"STREAM_BUILD_ENABLED": "true", **env}, tweak=tweak(2, 2), capacity=8)
    await sql(h, kind, url, "CREATE TABLE big AS SELECT i AS id FROM generate_series(1, 100000) AS g(i)")
    scan(h, "s", "SELECT id FROM big ORDER BY id")
    f = h.fake
    await h.executed(4)
    producer = h.orch._runtimes["s"].producer
    stream = h.orch._runtimes["s"].stream
    assert await open_cursors(h, kind, url) == (1 if kind == "postgresql" else 0)
    f.fail("s/0.0", m.USER_ERROR, False, "bad row")
    await until(lambda: producer.done(), what="producer stopped")
    f.deliver("exec-1", [f.completed("s/0.1", 1), f.completed("s/1.0", 2), f.completed("s/1.1", 3)])
    res = await h.terminal("s")
    assert res.state == TaskState.FAILED and res.result.failure_code == "CALL_FAILED"
    await until(lambda: stream.closed, what="scan closed")
    assert stream.rows < 100000
    assert await open_cursors(h, kind, url) == 0


async def test_the_task_deadline_stops_the_cursor(make_harness, source_env):
    kind, url, env = source_env
    h = await make_harness(env={"STREAM_BUILD_ENABLED": "true", **env}, tweak=tweak(2, 1))
    await sql(h, kind, url, "CREATE TABLE big AS SELECT i AS id FROM generate_series(1, 100000) AS g(i)")
    scan(h, "s", "SELECT id FROM big ORDER BY id", task_timeout_ms=1000)
    await h.executed(2)
    stream = h.orch._runtimes["s"].stream
    h.clock.advance(1000)
    h.orch.tick()
    assert h.orch.get_task_result("s").result.failure_code == "TIMED_OUT"
    await until(lambda: stream.closed, what="scan closed")
    await settle()
    assert await open_cursors(h, kind, url) == 0


async def test_without_streaming_the_scan_is_drained_in_the_builder(make_harness, source_env):
    kind, url, env = source_env
    h = await make_harness(env=env, capacity=64)
    await sql(h, kind, url, "CREATE TABLE src AS SELECT i AS id FROM generate_series(1, 5) AS g(i)")
    scan(h, "e", "SELECT id FROM src ORDER BY id")
    sent = await h.executed(5)
    assert [s.payload["args"] for s in sent] == [[1], [2], [3], [4], [5]]
    for s in sent:
        h.fake.complete(s.call_id, s.payload["args"][0])
    res = await h.terminal("e")
    assert outputs(res) == [1, 2, 3, 4, 5]
    assert await open_cursors(h, kind, url) == 0


@pytest.mark.parametrize("query,needle", [
    ("SELECT * FROM no_such_table", "no_such_table"),
    ("DELETE FROM src RETURNING id", "read-only"),
])
async def test_bad_queries_fail_the_builder_and_the_worker_keeps_serving(make_harness, source_env, query, needle):
    kind, url, env = source_env
    h = await make_harness(env={"STREAM_BUILD_ENABLED": "true", **env})
    await sql(h, kind, url, "CREATE TABLE src AS SELECT 1 AS id")
    scan(h, "bad", query)
    res = await h.terminal("bad")
    assert res.result.failure_code == "BUILDER_FAILED" and needle in res.result.failure_message
    assert doubled_prefix(res.result.failure_message) is None, res.result.failure_message
    assert h.fake.executes == []
    assert await sql(h, kind, url, "SELECT count(*) FROM src") == [(1,)]
    scan(h, "good", "SELECT id FROM src")
    sent = await h.executed(1)
    h.fake.complete(sent[0].call_id, 1)
    assert (await h.terminal("good")).state == TaskState.SUCCEEDED
    assert await open_cursors(h, kind, url) == 0


async def test_unknown_source_names_the_configured_ones(make_harness, tmp_path):
    h = await make_harness()                    # no dataSources: the default `local`
    payload = orjson.dumps({"source": "main", "query": "SELECT 1", "functionId": "echo"})
    h.orch.submit_task(SubmitTaskRequest(task_id="u", function_call=FunctionCall("dbscan", payload)))
    res = await h.terminal("u")
    assert res.result.failure_code == "BUILDER_FAILED"
    assert "unknown data source 'main' (configured: local)" in res.result.failure_message
    assert doubled_prefix(res.result.failure_message) is None, res.result.failure_message


@pytest.mark.parametrize("source_env", ["postgresql"], indirect=True)   # a DuckDB file has no connection
async def test_a_connection_lost_mid_stream_fails_the_task_retryable(make_harness, source_env):
    # The same payload may succeed on a retry: the stream's own error says so, and the
    # streaming path keeps it (the eager path and the scan's opening already did).
    kind, url, env = source_env
    h = await make_harness(env={"STREAM_BUILD_ENABLED": "true", **env}, tweak=tweak(2, 1), capacity=8)
    await sql(h, kind, url, "CREATE TABLE big AS SELECT i AS id FROM generate_series(1, 100000) AS g(i)")
    scan(h, "lost", "SELECT id FROM big ORDER BY id")
    sent = await h.executed(2)
    await sql(h, kind, url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE application_name = 'blockx-worker' AND pid <> pg_backend_pid()")
    done = 0
    for _ in range(200):                # rows the scan holds already still become calls; a fetch then fails
        sent = h.fake.executes
        for s in sent[done:]:
            h.fake.complete(s.call_id, s.payload["args"][0])
        done = len(sent)
        if h.orch.get_task_result("lost").state == TaskState.FAILED:
            break
        await asyncio.sleep(0.02)
    res = await h.terminal("lost")
    assert res.state == TaskState.FAILED and res.result.failure_code == "BUILDER_FAILED", res.result.failure_message
    assert "connection was lost" in res.result.failure_message, res.result.failure_message
    assert res.result.retryable, res.result.failure_message
