"""One tenant against another's database work, end to end: a real block Worker
with real executors, a real PostgreSQL (`main`, initdb + pg_ctl) and a DuckDB
file (`local`), phaseIoTimeoutMs at 1 s. The attacker is any client that may
submit a dbscan task or a call that uses the `sql` IO backend. Every identity's
scans run as the Worker's one database role, so what one tenant's query does
to the role's sessions it does to every tenant's: here the victim's scan is a
session of that role the test holds itself.

Each attack of the review is reproduced: statements that are not a plain query,
pg_terminate_backend of the role's other sessions, a runaway scan on both
databases (it must end within phaseIoTimeoutMs + 1 s; the figure is printed),
DuckDB functions with effects or that show paths, and a connection lost
mid-scan (which must fail retryable)."""
from __future__ import annotations

import asyncio
import json
import pathlib
import tempfile
import time
import uuid

import asyncpg
import pytest

from tests.e2e.conftest import make_functions_dir
from tests.support.worker import WorkerProcess, outputs

pytestmark = pytest.mark.e2e

FAILED, SUCCEEDED = 4, 3
PHASE_IO_MS = 1000
# The aim is phaseIoTimeoutMs + 1 s; the bound asserted leaves room for a loaded
# 2-core machine (the figure itself is printed for the report).
ENDS_WITHIN_S = PHASE_IO_MS / 1000 + 6


class Plane:
    def __init__(self, w: WorkerProcess, dsn: str, state: str):
        self.w, self.dsn, self.state = w, dsn, state
        self.n = 0

    def tid(self, what: str) -> str:
        self.n += 1
        return f"{what}-{self.n}"

    def dbscan(self, source: str, query: str, timeout: float = 60.0):
        tid = self.tid("scan")
        self.w.submit(tid, "dbscan", {"source": source, "query": query, "functionId": "echo"}, timeout_ms=60_000)
        return self.w.wait_terminal(tid, timeout=timeout)

    def sql(self, source: str, query: str):
        tid = self.tid("sql")
        self.w.submit_calls(tid, [("sql_rows", [source, query])], retry=(1, 0, 0))
        return self.w.wait_terminal(tid)


def _run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def plane(tmp_path_factory, postgres_server):
    tmp = tmp_path_factory.mktemp("hostile-db")
    name = "hostile_" + uuid.uuid4().hex[:10]

    async def setup():
        conn = await asyncpg.connect(postgres_server.dsn)
        try:
            await conn.execute(f"CREATE DATABASE {name}")
        finally:
            await conn.close()
    _run(setup())
    dsn = postgres_server.dsn.rsplit("/", 1)[0] + "/" + name
    cfg = pathlib.Path(tempfile.mkdtemp(prefix="bx-cfg-")) / "worker.json"
    # Small fetches, so a scan is many round trips (one is killed mid-scan below).
    cfg.write_text(json.dumps({"dataPlane": {"scanFetchRows": 50}}))
    state = str(tmp / "state")
    env = {"STATE_DIR": state, "PHASE_IO_TIMEOUT_MS": str(PHASE_IO_MS), "WORKER_CONFIG": str(cfg),
           "BLOCKX_DATA_SOURCES": json.dumps({"main": dsn, "local": f"duckdb://{state}/local.duckdb"}),
           "RESULT_RETENTION_MS": "120000"}
    w = WorkerProcess(env, profile="block", functions_dir=make_functions_dir(tmp / "fn"), executors=1)
    w.start()
    try:
        yield Plane(w, dsn, state)
    finally:
        w.stop()


def assert_refused(res, *needles: str) -> str:
    assert res.state == FAILED, (res.state, res.failure_message)
    msg = res.failure_message
    assert not res.retryable, msg
    for n in needles:
        assert n in msg, msg
    return msg


# --- runaway scans ----------------------------------------------------------------

# The review's DuckDB query counted range(1e11) (about 35 s here); 1e12 runs past
# any task timeout a test would set.
RUNAWAY = {"main": "SELECT count(*) AS n FROM generate_series(1, 1000000000000)",
           "local": "SELECT count(*) AS n FROM range(1000000000000)"}


@pytest.mark.parametrize("source", ["main", "local"])      # PostgreSQL, DuckDB
def test_a_runaway_scan_ends_within_phase_io_timeout(plane, source):
    """On main a DuckDB scan ran until the task's deadline (up to 8 h)."""
    t0 = time.monotonic()
    res = plane.dbscan(source, RUNAWAY[source], timeout=90)
    took = time.monotonic() - t0
    print(f"\n{source}: runaway dbscan ended after {took:.2f} s, submit to terminal "
          f"(phaseIoTimeoutMs {PHASE_IO_MS} ms)")
    assert res.state == FAILED and res.failure_code == "BUILDER_FAILED", (res.state, res.failure_message)
    msg = res.failure_message
    assert "statement timeout" in msg or "longer than phaseIoTimeoutMs (1000 ms)" in msg, msg
    assert res.retryable, msg
    assert took < ENDS_WITHIN_S, took
    assert outputs(plane.dbscan(source, "SELECT 1 AS one")) == [{"one": 1}]


# --- PostgreSQL -------------------------------------------------------------------

NOT_A_QUERY = {"PREPARE": "PREPARE __asyncpg_stmt_44__ AS SELECT 1", "EXECUTE": "EXECUTE __asyncpg_stmt_1__",
               "SET": "SET statement_timeout = 0", "LOCK": "LOCK TABLE pg_class IN ACCESS EXCLUSIVE MODE",
               "NOTIFY": "NOTIFY chan, 'x'", "LISTEN": "LISTEN chan", "DO": "DO $$ BEGIN END $$",
               "COPY": "COPY (SELECT 1) TO STDOUT"}


@pytest.mark.parametrize("what", list(NOT_A_QUERY))
def test_a_statement_that_is_not_a_plain_query_fails_the_task_naming_it(plane, what):
    res = plane.dbscan("main", NOT_A_QUERY[what])
    assert res.failure_code == "BUILDER_FAILED", res.failure_code
    assert_refused(res, f"refused the {what} statement", "only a plain read-only query")


def test_the_sql_io_backend_refuses_the_same(plane):
    assert_refused(plane.sql("main", "PREPARE p AS SELECT 1"), "refused the PREPARE statement")
    assert_refused(plane.sql("main", "SELECT pg_advisory_lock(1)"), "refused the function pg_advisory_lock")
    res = plane.sql("main", "SELECT 41 + 1 AS x")
    assert res.state == SUCCEEDED and outputs(res) == [[{"x": 42}]], res.failure_message


def test_pg_terminate_backend_from_a_scan_leaves_the_roles_other_sessions_alone(plane):
    """The review's attack: on main it ended every session of the role, another
    identity's running scan among them."""
    async def attack():
        victim = await asyncpg.connect(plane.dsn, server_settings={"application_name": "victim"})
        try:
            pid = victim.get_server_pid()
            running = asyncio.ensure_future(victim.fetchval("SELECT pg_sleep(30)"))
            admin = await asyncpg.connect(plane.dsn)
            try:
                for _ in range(100):              # the victim's scan is running
                    if await admin.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 "
                                            "AND state = 'active'", pid):
                        break
                    await asyncio.sleep(0.05)
            finally:
                await admin.close()
            res = await asyncio.to_thread(
                plane.dbscan, "main",
                # The review's query, less its own session (which it may end first)
                "SELECT pg_terminate_backend(pid) AS killed FROM pg_stat_activity WHERE usename = current_user "
                "AND pid <> pg_backend_pid()")
            check = await asyncpg.connect(plane.dsn)        # after the attack: one it could not end
            try:
                alive = await check.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)
                await check.execute("SELECT pg_cancel_backend($1)", pid)       # the test's own victim, done
            finally:
                await check.close()
            try:
                await running
            except (asyncpg.PostgresError, asyncpg.InterfaceError):
                pass                     # cancelled by the test (or, on main, ended by the attack)
            return res, alive
        finally:
            victim.terminate()

    res, alive = _run(attack())
    assert alive == 1, "the attacker's scan ended another session of the role"
    assert res.failure_code == "BUILDER_FAILED", res.failure_code
    assert_refused(res, "refused the function pg_terminate_backend")


def test_a_connection_lost_mid_scan_fails_the_task_retryable(plane):
    """A scan whose backend the server ends (a restart, an administrator, on
    main another tenant's pg_terminate_backend): on main the task failed
    BUILDER_FAILED "connection has been released back to the pool", not
    retryable."""
    mark = "victim_" + uuid.uuid4().hex[:8]
    query = (f"SELECT g AS {mark} FROM generate_series(1, 4000) AS g "
             "WHERE pg_sleep(0.002)::text = ''")                       # about 8 s, 50 rows a round trip

    async def kill_mid_scan():
        admin = await asyncpg.connect(plane.dsn)
        try:
            for _ in range(400):
                pid = await admin.fetchval("SELECT pid FROM pg_stat_activity WHERE query LIKE $1 "
                                           "AND pid <> pg_backend_pid()", f"%{mark}%")
                if pid:
                    await asyncio.sleep(0.5)     # well into the scan: past its first rows
                    return await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
                await asyncio.sleep(0.05)
            return False
        finally:
            await admin.close()

    tid = plane.tid("lost")
    plane.w.submit(tid, "dbscan", {"source": "main", "query": query, "functionId": "echo"}, timeout_ms=60_000)
    assert _run(kill_mid_scan()), "the scan was never seen running"
    res = plane.w.wait_terminal(tid, timeout=60)
    assert res.state == FAILED and res.failure_code == "BUILDER_FAILED", (res.state, res.failure_message)
    msg = res.failure_message
    assert "released back to the pool" not in msg, msg
    assert res.retryable, msg
    assert outputs(plane.dbscan("main", "SELECT 2 AS two")) == [{"two": 2}]


# --- DuckDB -----------------------------------------------------------------------

DUCK_REFUSED = {"nextval": "SELECT nextval('s') AS n", "checkpoint": "SELECT * FROM checkpoint()",
                "duckdb_settings": "SELECT name, value FROM duckdb_settings()",
                "duckdb_databases": "SELECT path FROM duckdb_databases()",
                "current_setting": "SELECT current_setting('temp_directory') AS t"}


@pytest.mark.parametrize("fn", list(DUCK_REFUSED))
def test_duckdb_functions_with_effects_or_paths_are_refused(plane, fn):
    res = plane.dbscan("local", DUCK_REFUSED[fn])
    msg = assert_refused(res, f"refused the function {fn}")
    assert plane.state not in msg and "local.duckdb" not in msg, msg
    res = plane.sql("local", DUCK_REFUSED[fn])
    assert_refused(res, f"refused the function {fn}")
    assert plane.state not in res.failure_message


def test_duckdb_ordinary_selects_still_run(plane):
    q = ("WITH t AS (SELECT i, i % 3 AS g FROM range(1, 10) r(i)) "
         "SELECT g, count(*) AS n, sum(i) AS s, row_number() OVER (ORDER BY g) AS rn FROM t GROUP BY g ORDER BY g")
    assert outputs(plane.dbscan("local", q)) == [{"g": 0, "n": 3, "s": 18, "rn": 1}, {"g": 1, "n": 3, "s": 12, "rn": 2},
                                                  {"g": 2, "n": 3, "s": 15, "rn": 3}]


# --- the role docs/data-plane.md advises -------------------------------------------

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "data-plane.md"


def _role_block() -> str:
    text = DOCS.read_text()
    section = text[text.index("### The database role"):]
    return section[section.index("```sql\n") + 7:section.index("\n```", section.index("```sql\n"))]


def test_the_role_docs_data_plane_md_advises_reads_its_grants_and_cannot_signal(postgres_server, caplog):
    """docs/data-plane.md's role block, run as written (its database and role
    names made unique) against a real PostgreSQL; then, as that role, what the
    Worker's own checks would never let through is refused by the server too:
    ending another session of the role, reading the server's files, a table
    without a grant. The Worker's source still scans and upserts, and logs no
    data_source_privileged."""
    from blockx.plugins.data.pg import PgSource

    db, role = "app_" + uuid.uuid4().hex[:8], "bw_" + uuid.uuid4().hex[:8]
    sql = _role_block().replace("DATABASE app", f"DATABASE {db}").replace("blockx_worker", role)
    admin_dsn = postgres_server.dsn.rsplit("/", 1)[0] + "/" + db
    host = postgres_server.dsn.split("@", 1)[1].rsplit("/", 1)[0]
    role_dsn = f"postgresql://{role}:change-me@{host}/{db}"

    async def check():
        root = await asyncpg.connect(postgres_server.dsn)
        try:
            await root.execute(f"CREATE DATABASE {db}")
        finally:
            await root.close()
        admin = await asyncpg.connect(admin_dsn)
        try:
            await admin.execute("CREATE TABLE events (id bigint PRIMARY KEY, v text); "
                                "CREATE TABLE users (id bigint PRIMARY KEY); "
                                "CREATE TABLE results (id bigint PRIMARY KEY, n bigint); "
                                "CREATE TABLE secret (x text); INSERT INTO events VALUES (1, 'a'), (2, 'b')")
            await admin.execute(sql)                                  # the docs' block, as written
        finally:
            await admin.close()
        other = await asyncpg.connect(role_dsn)        # another session of the role (another tenant's scan)
        me = await asyncpg.connect(role_dsn)
        try:
            for query, needle in (("SELECT pg_terminate_backend($1)", "permission denied for function"),
                                  ("SELECT pg_cancel_backend($1)", "permission denied for function")):
                with pytest.raises(asyncpg.PostgresError) as ei:
                    await me.fetchval(query, other.get_server_pid())
                assert needle in str(ei.value), ei.value
            for query in ("SELECT pg_read_file('/etc/passwd')", "SELECT * FROM secret"):
                with pytest.raises(asyncpg.PostgresError) as ei:
                    await me.fetch(query)
                assert "permission denied" in str(ei.value), ei.value
            assert await other.fetchval("SELECT 1") == 1                # still there
        finally:
            await me.close()
            await other.close()
        src = PgSource("main", role_dsn, statement_timeout_ms=PHASE_IO_MS)
        try:
            columns, rows = await src.fetch_rows("SELECT id, v FROM events ORDER BY id", [], 10)
            assert rows == [(1, "a"), (2, "b")]
            types = await src.table_columns(None, "results")
            assert types == {"id": "bigint", "n": "bigint"}
            assert await src.upsert(None, "results", ["id"], [(("id", "n"), [[1, 2], [10, 20]])], types=types) == 2
        finally:
            await src.aclose()

    with caplog.at_level("WARNING", logger="blockx.data"):
        _run(check())
    assert not [r for r in caplog.records if r.getMessage() == "data_source_privileged"]
