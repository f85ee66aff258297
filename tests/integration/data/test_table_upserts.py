"""tableUpserts against both databases: one transaction, ON CONFLICT upserts,
nothing written when any row is bad."""

from __future__ import annotations

import orjson
import pytest

from blockx.plugins.writers.table_upserts import TableUpsertsPlugin


def cfg(table, **kw) -> bytes:
    return orjson.dumps({"target": "main", "table": table, "key": ["id"], **kw})


def out(*values) -> list[bytes]:
    return [orjson.dumps(v) for v in values]


async def make(db, table):
    await db.exec(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, name TEXT, score DOUBLE PRECISION, "
                  f"ok BOOLEAN, meta {'JSON' if db.kind == 'duckdb' else 'JSONB'}, day DATE)")


async def test_rows_are_upserted_and_a_retry_leaves_one_row_per_key(db, table):
    await make(db, table)
    w = TableUpsertsPlugin(db.plane)
    outputs = out({"id": 1, "name": "a", "score": 1}, [{"id": 2, "name": "b", "ok": True},
                                                     {"id": 3, "meta": {"k": [1]}, "day": "2026-11-30"}])
    r = await w.execute(cfg(table), outputs)
    assert r.ok, r.message
    assert orjson.loads(r.details) == {"rows": 3, "target": "main", "table": table}
    r = await w.execute(cfg(table), outputs)                # the retried task
    assert r.ok, r.message
    rows = await db.rows(f"SELECT id, name, score, ok, day::TEXT FROM {table} ORDER BY id")
    assert rows == [(1, "a", 1.0, None, None), (2, "b", None, True, None), (3, None, None, None, "2026-11-30")]
    # an update touches only the fields the row carries
    r = await w.execute(cfg(table), out({"id": 1, "score": 2.5}))
    assert r.ok
    assert await db.rows(f"SELECT id, name, score FROM {table} WHERE id = 1") == [(1, "a", 2.5)]


async def test_the_same_key_twice_in_a_task_merges_in_order(db, table):
    await make(db, table)
    w = TableUpsertsPlugin(db.plane)
    r = await w.execute(cfg(table), out({"id": 7, "name": "x", "score": 1}, {"id": 7, "name": "y"}))
    assert r.ok, r.message
    assert await db.rows(f"SELECT id, name, score FROM {table}") == [(7, "y", 1.0)]


@pytest.mark.parametrize("bad,needle", [
    ({"id": 9, "name": 5}, "row 2 (output 2), field 'name': expected a string, got number 5"),
    ({"id": 9, "colour": "red"}, "row 2 (output 2): unknown column 'colour'"),
    ({"name": "no key"}, "row 2 (output 2): key field 'id' is missing"),
    ({"id": None, "name": "z"}, "row 2 (output 2): key field 'id' is null"),
    ({"id": "9"}, "field 'id': expected an integer, got string"),
    ({"id": 9, "ok": 1}, "field 'ok': expected a boolean"),
    (42, "output 2 is number, expected a JSON object"),
    ([{"id": 9}, "x"], "output 2 item 1 is string"),
])
async def test_a_bad_row_writes_nothing(db, table, bad, needle):
    await make(db, table)
    w = TableUpsertsPlugin(db.plane)
    r = await w.execute(cfg(table), out({"id": 1, "name": "a"}, {"id": 2, "name": "b"}, bad))
    assert not r.ok
    assert needle in r.message and "nothing written" in r.message, r.message
    assert await db.rows(f"SELECT count(*) FROM {table}") == [(0,)]


async def test_a_database_error_rolls_back_the_whole_task(db, table):
    await make(db, table)
    w = TableUpsertsPlugin(db.plane)
    # A date the database rejects: checked by the database, after other rows went in.
    r = await w.execute(cfg(table), out({"id": 1, "name": "a"}, {"id": 2, "day": "not a date"}))
    assert not r.ok and "nothing written" in r.message
    assert await db.rows(f"SELECT count(*) FROM {table}") == [(0,)]


async def test_create_table_from_the_first_row(db, table):
    w = TableUpsertsPlugin(db.plane)
    r = await w.execute(cfg(table), out({"id": 1, "v": 1.5}))
    assert not r.ok and "does not exist" in r.message and "createTable" in r.message
    r = await w.execute(cfg(table, createTable=True), out({"id": 1, "v": 1.5, "s": "a"}, {"id": 2, "v": 2}))
    assert r.ok, r.message
    r = await w.execute(cfg(table, createTable=True), out({"id": 2, "v": 3}))
    assert r.ok, r.message
    assert await db.rows(f"SELECT id, v, s FROM {table} ORDER BY id") == [(1, 1.5, "a"), (2, 3.0, None)]


@pytest.mark.parametrize("conf,needle", [
    ({"target": "nope", "table": "t", "key": ["id"]}, "unknown data source 'nope' (configured: main)"),
    ({"target": "main", "table": "t; DROP TABLE x", "key": ["id"]}, "not a plain SQL identifier"),
    ({"target": "main", "table": "t", "key": []}, "key must be"),
    ({"target": "main", "table": "t", "key": ["id"], "dsn": "x"}, "unknown config key(s) 'dsn'"),
])
async def test_bad_configs_fail_with_a_clear_message(db, conf, needle):
    r = await TableUpsertsPlugin(db.plane).execute(orjson.dumps(conf), out({"id": 1}))
    assert not r.ok and needle in r.message, r.message


async def test_no_outputs_write_nothing_and_succeed(db, table):
    await make(db, table)
    r = await TableUpsertsPlugin(db.plane).execute(cfg(table), [])
    assert r.ok and orjson.loads(r.details)["rows"] == 0


async def test_a_transient_postgresql_error_is_retryable(postgres_server, tmp_path, table):
    # A lock held by another session: the upsert's statement runs past the
    # statement timeout (phaseIoTimeoutMs), a failure that a retry may pass.
    import asyncpg

    from blockx.plugins.data.plane import DataPlane
    plane = DataPlane({"main": postgres_server.dsn}, bundle_root=str(tmp_path), statement_timeout_ms=300)
    holder = await asyncpg.connect(postgres_server.dsn)
    try:
        await holder.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, name TEXT)")
        tr = holder.transaction()
        await tr.start()
        await holder.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        r = await TableUpsertsPlugin(plane).execute(cfg(table), out({"id": 1, "name": "a"}))
        assert not r.ok and getattr(r, "retryable", False), r
        assert "statement timeout" in r.message and r.message.startswith("tableUpserts: nothing written: PostgreSQL")
        await tr.rollback()
        r = await TableUpsertsPlugin(plane).execute(cfg(table), out({"id": 1, "name": "a"}))
        assert r.ok, r.message                               # and the retry passes
    finally:
        await holder.close()
        await plane.aclose()


async def test_a_permanent_postgresql_error_is_not_retryable(postgres_server, tmp_path, table):
    import asyncpg

    from blockx.plugins.data.plane import DataPlane
    plane = DataPlane({"main": postgres_server.dsn}, bundle_root=str(tmp_path), statement_timeout_ms=5000)
    conn = await asyncpg.connect(postgres_server.dsn)
    try:
        await conn.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, name TEXT CHECK (name <> 'bad'))")
        r = await TableUpsertsPlugin(plane).execute(cfg(table), out({"id": 1, "name": "bad"}))
        assert not r.ok and not r.retryable and "check constraint" in r.message
    finally:
        await conn.close()
        await plane.aclose()


async def test_a_duckdb_statement_past_the_io_timeout_is_interrupted_and_rolled_back(tmp_path, table):
    from blockx.plugins.data.plane import DataPlane
    url = f"duckdb://{tmp_path}/main.duckdb"
    rows = [orjson.dumps([{"id": i, "name": f"n{i}"} for i in range(j, j + 10_000)]) for j in range(0, 300_000, 10_000)]
    slow = DataPlane({"main": url}, bundle_root=str(tmp_path), statement_timeout_ms=1)
    try:
        cur = slow.source("main").cursor()
        cur.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, name TEXT)")
        cur.close()
        r = await TableUpsertsPlugin(slow).execute(cfg(table), rows)
        assert not r.ok and getattr(r, "retryable", False), r
        assert r.message == "tableUpserts: nothing written: DuckDB: a statement ran longer than phaseIoTimeoutMs (1 ms)"
        cur = slow.source("main").cursor()
        assert cur.execute(f"SELECT count(*) FROM {table}").fetchall() == [(0,)]      # rolled back
        cur.close()
    finally:
        await slow.aclose()
    ok = DataPlane({"main": url}, bundle_root=str(tmp_path), statement_timeout_ms=60_000)
    try:
        r = await TableUpsertsPlugin(ok).execute(cfg(table), rows)
        assert r.ok, r.message
    finally:
        await ok.aclose()


DROP_VICTIM = 'v" BIGINT, PRIMARY KEY ("id")); DROP TABLE {victim}; COMMIT; CREATE TABLE "z" ("id" BIGINT, "q'


@pytest.mark.parametrize("field", [DROP_VICTIM, 'x" BIGINT, "y', 'v" BIGINT) --', "a;b", "a(b)", "v\n"])
async def test_create_table_refuses_a_bad_field_name_and_leaves_other_tables(db, table, field):
    victim = table + "_victim"
    field = field.replace("{victim}", victim)
    await db.exec(f"CREATE TABLE {victim} (id BIGINT PRIMARY KEY, v BIGINT)")
    await db.exec(f"INSERT INTO {victim} VALUES (1, 10), (2, 20)")
    r = await TableUpsertsPlugin(db.plane).execute(cfg(table, createTable=True), out({"id": 1, field: 1}))
    assert not r.ok
    assert f"nothing written: row 0 (output 0): field {field!r} is not a plain SQL identifier" in r.message, r.message
    assert await db.rows(f"SELECT id, v FROM {victim} ORDER BY id") == [(1, 10), (2, 20)]
    assert await db.rows("SELECT count(*) FROM information_schema.tables WHERE table_name IN ($1, 'z')", table) \
        == [(0,)]


async def test_an_existing_column_named_outside_the_rule_is_never_written(db, table):
    await db.exec(f'CREATE TABLE {table} (id BIGINT PRIMARY KEY, "a b" TEXT)')
    r = await TableUpsertsPlugin(db.plane).execute(cfg(table), out({"id": 1, "a b": "x"}))
    assert not r.ok and "row 0 (output 0): field 'a b' is not a plain SQL identifier" in r.message, r.message
    assert await db.rows(f"SELECT count(*) FROM {table}") == [(0,)]


async def test_a_built_statement_holding_two_statements_is_refused(db, table):
    """The guard under the identifier rule: a statement the Worker builds runs as
    exactly one statement on both databases."""
    await db.exec(f"CREATE TABLE {table} (id BIGINT)")
    two = f"INSERT INTO {table} VALUES (1); DROP TABLE {table}"
    if db.kind == "duckdb":
        from blockx.plugins.data.duck_sql import execute_one
        from blockx.plugins.data.errors import DataSourceError
        cur = db.source.cursor()
        try:
            with pytest.raises(DataSourceError, match="parses to 2 statements"):
                execute_one(cur, two)
        finally:
            cur.close()
    else:
        import asyncpg

        from blockx.plugins.data.pg import _one
        pool = await db.source.pool()
        async with pool.acquire() as conn:
            with pytest.raises(asyncpg.PostgresSyntaxError, match="cannot insert multiple commands"):
                await _one(conn, two)
    assert await db.rows(f"SELECT count(*) FROM {table}") == [(0,)]
