"""Attacks on the data plane through a function's output field names, end to end.

A real bundle Worker with real executors, a real PostgreSQL (`main`) and an
embedded DuckDB file (`local`); the attacker is any client that can submit a
callList task whose `echo` call returns a row with a hostile field name. The
writers (bundleWrite, tableUpserts with createTable) use field names as column
names. Each case must fail the task PLUGIN_FAILED naming the row and the field,
write nothing, leave every other table as it was, and never copy a file the
Worker can read into anything a client gets back."""
from __future__ import annotations

import asyncio
import json
import os
import secrets
import uuid

import asyncpg
import pytest

from tests.e2e.conftest import make_functions_dir
from tests.support.worker import WorkerProcess, outputs

pytestmark = pytest.mark.e2e

FAILED, SUCCEEDED = 4, 3
VICTIM_ROWS = [{"id": i, "v": i * 10} for i in range(1, 6)]


class Plane:
    """The module's Worker, its bundle root, the secret and the victim tables."""

    def __init__(self, worker: WorkerProcess, root: str, secret_path: str, token: str, dsn: str):
        self.w, self.root, self.secret_path, self.token, self.dsn = worker, root, secret_path, token, dsn
        self.n = 0

    def task_id(self, what: str) -> str:
        self.n += 1
        return f"{what}-{self.n}"

    def run(self, task_id: str, rows, handler) -> object:
        self.w.submit(task_id, "callList", {"calls": [{"functionId": "echo", "args": [r]} for r in rows]},
                      result_handler=handler)
        return self.w.wait_terminal(task_id)

    def sql(self, source: str, query: str) -> list[dict]:
        tid = self.task_id("sql")
        self.w.submit_calls(tid, [("sql_rows", [source, query])])
        res = self.w.wait_terminal(tid)
        assert res.state == SUCCEEDED, res.failure_message
        return outputs(res)[0]

    def victim(self, source: str) -> list[dict]:
        return self.sql(source, "SELECT id, v FROM victim ORDER BY id")

    def table_exists(self, source: str, table: str) -> bool:
        rows = self.sql(source, f"SELECT count(*) AS n FROM information_schema.tables WHERE table_name = '{table}'")
        return rows[0]["n"] > 0

    def bundle_files(self) -> dict[str, bytes]:
        out = {}
        for d, _dirs, files in os.walk(self.root):
            for f in files:
                p = os.path.join(d, f)
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, self.root)] = fh.read()
        return out


@pytest.fixture(scope="module")
def plane(tmp_path_factory, postgres_server):
    tmp = tmp_path_factory.mktemp("attack")
    # A root-only file: the Worker (root here) can read it, no client may.
    token = "SECRET-" + secrets.token_hex(16)
    secret_path = str(tmp / "secret.key")
    fd = os.open(secret_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, token.encode())
    os.close(fd)
    assert os.stat(secret_path).st_mode & 0o777 == 0o600 and os.stat(secret_path).st_uid == 0

    name = "attack_" + uuid.uuid4().hex[:10]

    async def setup_pg():
        conn = await asyncpg.connect(postgres_server.dsn)
        try:
            await conn.execute(f"CREATE DATABASE {name}")
        finally:
            await conn.close()
        conn = await asyncpg.connect(postgres_server.dsn.rsplit("/", 1)[0] + "/" + name)
        try:
            await conn.execute("CREATE TABLE victim (id BIGINT PRIMARY KEY, v BIGINT)")
            await conn.executemany("INSERT INTO victim VALUES ($1, $2)", [(r["id"], r["v"]) for r in VICTIM_ROWS])
        finally:
            await conn.close()
    asyncio.run(setup_pg())
    dsn = postgres_server.dsn.rsplit("/", 1)[0] + "/" + name

    root = str(tmp / "bundles")
    os.makedirs(root)
    env = {"STATE_DIR": str(tmp / "state"), "BUNDLE_ROOT": root, "TASK_SLOTS": "16",
           "BLOCKX_DATA_SOURCES": json.dumps({"main": dsn, "local": f"duckdb://{tmp}/state/local.duckdb"}),
           "RESULT_RETENTION_MS": "120000"}
    w = WorkerProcess(env, profile="bundle", functions_dir=make_functions_dir(tmp / "fn"))
    w.start()
    try:
        p = Plane(w, root, secret_path, token, dsn)
        res = p.run("victim-local", VICTIM_ROWS,
                    ("tableUpserts", {"target": "local", "table": "victim", "key": ["id"], "createTable": True}))
        assert res.state == SUCCEEDED, res.failure_message
        assert p.victim("local") == VICTIM_ROWS and p.victim("main") == VICTIM_ROWS
        yield p
    finally:
        w.stop()


def assert_refused(res, field: str, row: int = 0, output: int = 0) -> None:
    """FAILED, PLUGIN_FAILED, the message names the row and the field."""
    assert res.state == FAILED, ("the task was not refused", res.state, res.failure_message,
                                 [pr.message for pr in res.plugin_results])
    assert res.failure_code == "PLUGIN_FAILED", res.failure_code
    msg = res.failure_message
    assert "nothing written" in msg and f"row {row} (output {output})" in msg and repr(field) in msg, msg
    assert "not a plain SQL identifier" in msg, msg


def secret_nowhere(p: Plane, res) -> None:
    """The secret is in no bundle file and in nothing the task's client gets back."""
    token = p.token.encode()
    leaked = [path for path, data in p.bundle_files().items() if token in data]
    assert not leaked, f"the root-only file was copied into {leaked}"
    assert token not in res.SerializeToString()


# --- the two attacks reproduced on main ----------------------------------------------


def test_a_read_text_field_name_never_copies_a_root_only_file_into_a_bundle(plane):
    """On main the field name closed the quoted alias and added a column
    (SELECT content FROM read_text(<secret>)): the Parquet file held the secret,
    and a bundleScan of it returned it to the client."""
    p = plane
    field = f"a\" , (SELECT content FROM read_text('{p.secret_path}')) AS \"leak"
    tid = p.task_id("readtext")
    res = p.run(tid, [{"id": 1, field: 1}], ("bundleWrite", {"dir": "out/readtext"}))
    secret_nowhere(p, res)
    assert_refused(res, field)
    assert not os.path.exists(os.path.join(p.root, "out", "readtext", f"{tid}.parquet"))
    scan = p.task_id("scan")
    p.w.submit(scan, "bundleScan", {"files": "out/readtext/*.parquet", "functionId": "echo"})
    res = p.w.wait_terminal(scan)
    assert res.state == FAILED and "no file matches" in res.failure_message, res.failure_message
    secret_nowhere(p, res)


DROP_VICTIM = 'v" BIGINT, PRIMARY KEY ("id")); DROP TABLE victim; COMMIT; CREATE TABLE "z" ("id" BIGINT, "q'


@pytest.mark.parametrize("target", ["main", "local"])     # PostgreSQL, DuckDB
def test_a_drop_table_field_name_leaves_the_victim_table_and_its_rows(plane, target):
    """On main the CREATE TABLE of createTable spliced the first row's field names
    and ran as a multi-statement text: DROP TABLE victim; COMMIT ran."""
    p = plane
    table = "t_" + uuid.uuid4().hex[:10]
    res = p.run(p.task_id("drop"), [{"id": 1, DROP_VICTIM: 1}],
                ("tableUpserts", {"target": target, "table": table, "key": ["id"], "createTable": True}))
    assert p.victim(target) == VICTIM_ROWS, "the victim table lost rows or was dropped"
    assert not p.table_exists(target, "z")
    assert_refused(res, DROP_VICTIM)
    assert not p.table_exists(target, table)


# --- the payload families, on every writer that takes field names as columns ------------


PAYLOADS = {
    "double quote": 'leak" , 42 AS "x',
    "semicolon": 'v" BIGINT); DROP TABLE victim; CREATE TABLE "w" ("q',
    "comment": 'v" BIGINT, PRIMARY KEY ("id")) --',
    "parenthesis": 'v", (SELECT 42) AS "n',
    "newline": "v\n",
}
WRITERS = ["bundleWrite", "tableUpserts main", "tableUpserts local"]


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("kind", list(PAYLOADS))
def test_injection_payloads_fail_the_task_and_write_nothing(plane, writer, kind):
    p = plane
    field = PAYLOADS[kind]
    table = "t_" + uuid.uuid4().hex[:10]
    tid = p.task_id("inj")
    rows = [{"id": 1, field: 1}, {"id": 2, field: 2}]
    if writer == "bundleWrite":
        handler = ("bundleWrite", {"dir": f"out/{table}"})
    else:
        handler = ("tableUpserts", {"target": writer.split()[1], "table": table, "key": ["id"],
                                    "createTable": True})
    res = p.run(tid, rows, handler)
    assert_refused(res, field)
    if writer == "bundleWrite":
        assert not os.path.exists(os.path.join(p.root, "out", table)), "bundleWrite wrote a file"
    else:
        target = writer.split()[1]
        assert not p.table_exists(target, table), "the table was created"
        assert p.victim(target) == VICTIM_ROWS


def test_a_bad_field_in_a_later_row_of_bundle_write_names_that_row(plane):
    """bundleWrite takes every field of every row as a column: a hostile name in
    row 2 (output 1) is refused by name, and no file is written."""
    p = plane
    field = 'b" , 7 AS "c'
    tid = p.task_id("later")
    p.w.submit(tid, "callList", {"calls": [{"functionId": "echo", "args": [{"id": 1}]},
                                           {"functionId": "echo", "args": [[{"id": 2}, {"id": 3, field: 1}]]}]},
               result_handler=("bundleWrite", {"dir": "out/later"}))
    res = p.w.wait_terminal(tid)
    assert_refused(res, field, row=2, output=1)
    assert not os.path.exists(os.path.join(p.root, "out", "later"))


def test_plain_names_still_write_and_files_are_not_world_readable(plane):
    """The same Worker still writes ordinary rows, the bundle file 0640 in
    directories it made 0700."""
    p = plane
    tid = p.task_id("good")
    res = p.run(tid, [{"id": 1, "camelCase": "a", "with_digits_2": 2.5}], ("bundleWrite", {"dir": "out/good/day"}))
    assert res.state == SUCCEEDED, res.failure_message
    path = os.path.join(p.root, "out", "good", "day", f"{tid}.parquet")
    assert os.stat(path).st_mode & 0o777 == 0o640
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
    assert os.stat(os.path.join(p.root, "out", "good")).st_mode & 0o777 == 0o700
    scan = p.task_id("scan")
    p.w.submit(scan, "bundleScan", {"files": "out/good/day/*.parquet", "functionId": "echo"})
    res = p.w.wait_terminal(scan)
    assert res.state == SUCCEEDED, res.failure_message
    assert outputs(res) == [{"id": 1, "camelCase": "a", "with_digits_2": 2.5}]


# --- bounds ----------------------------------------------------------------------------


def test_a_task_id_of_256_bytes_writes_its_bundle_file_and_a_scan_reads_it_back(plane):
    """The longest task id the API accepts escapes to more than a file name may
    hold: bundleWrite still writes the task's file (a bounded, unique name), and
    its failure could never have told the client the bundle root's host path."""
    p = plane
    tid = "é" * 127 + "/x"                    # 256 bytes, 767 characters once escaped
    assert len(tid.encode()) == 256
    res = p.run(tid, [{"id": 7}], ("bundleWrite", {"dir": "out/long"}))
    assert res.state == SUCCEEDED, res.failure_message[:300]
    assert p.root not in res.failure_message
    names = os.listdir(os.path.join(p.root, "out", "long"))
    assert len(names) == 1 and len(names[0].encode()) < 255, names
    scan = p.task_id("scan-long")
    p.w.submit(scan, "bundleScan", {"files": "out/long/*.parquet", "functionId": "echo"})
    res = p.w.wait_terminal(scan)
    assert res.state == SUCCEEDED and outputs(res) == [{"id": 7}], res.failure_message


@pytest.mark.parametrize("target", ["main", "local"])
def test_a_query_result_past_the_byte_cap_fails_that_call_naming_the_setting(plane, target):
    """A 20 MB result (over the 16 MiB frame a result travels in) is refused by
    ioBackends.sql.maxResultBytes with a message naming it; the Worker serves on."""
    p = plane
    tid = p.task_id("big")
    p.w.submit_calls(tid, [("sql_rows", [target, "SELECT repeat('x', 20000000) AS s"])])
    res = p.w.wait_terminal(tid, timeout=60)
    assert res.state == FAILED, res.state
    msg = res.failure_message
    assert "larger than 8388608 bytes as JSON (ioBackends.sql.maxResultBytes, SQL_IO_MAX_RESULT_BYTES)" in msg, msg
    assert "after 1 attempt" in msg, msg          # not retryable: the same query fails again
    assert p.sql(target, "SELECT 1 AS one") == [{"one": 1}]


# --- the role of a PostgreSQL source --------------------------------------------------


def _dbscan(w, task_id: str, query: str):
    w.submit(task_id, "dbscan", {"source": "main", "query": query, "functionId": "echo"})
    return w.wait_terminal(task_id)


def test_a_superuser_source_lets_dbscan_read_server_files_and_the_worker_says_so(plane, tmp_path):
    """A READ ONLY transaction does not stop a superuser reading the database
    server's files: pg_read_file is refused by name now, but a view such as
    pg_hba_file_rules still reads one through a dbscan task. The Worker cannot
    tell a client's SELECT from an attack, so it warns once per source when the
    role is that powerful; a role with table grants only reads no file."""
    p = plane
    role, password = "reader_" + uuid.uuid4().hex[:8], secrets.token_hex(12)

    async def make_role():
        conn = await asyncpg.connect(p.dsn)
        try:
            await conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
            await conn.execute(f"GRANT SELECT ON victim TO {role}")
        finally:
            await conn.close()
    asyncio.run(make_role())
    base, db = p.dsn.rsplit("/", 1)
    reader_dsn = f"postgresql://{role}:{password}@{base.split('@', 1)[1]}/{db}"
    for who, dsn in (("superuser", p.dsn), ("reader", reader_dsn)):
        w = WorkerProcess({"STATE_DIR": str(tmp_path / who), "BLOCKX_DATA_SOURCES": json.dumps({"main": dsn})},
                          profile="block", functions_dir=make_functions_dir(tmp_path / f"fn-{who}"), executors=1)
        w.start()
        try:
            res = _dbscan(w, "ok-scan", "SELECT id FROM victim ORDER BY id LIMIT 1")
            assert res.state == SUCCEEDED and outputs(res) == [{"id": 1}], res.failure_message
            # The Worker refuses the file functions by name, whatever the role...
            res = _dbscan(w, "read-file", "SELECT pg_read_file('/etc/passwd', 0, 5) AS x")
            assert res.state == FAILED and "refused the function pg_read_file" in res.failure_message, \
                res.failure_message
            # ...but a name check is a second layer: a view that reads a server file
            # (pg_hba.conf) is no refused function, and only the role stops it.
            res = _dbscan(w, "read-view", "SELECT count(*) > 0 AS x FROM pg_hba_file_rules")
            if who == "superuser":                           # what the warning is about
                assert res.state == SUCCEEDED and outputs(res) == [{"x": True}], res.failure_message
                ev = w.wait_event("data_source_privileged", timeout=10, source="main")
                assert ev["privileges"] == "a superuser" and "pg_read_file" in ev["warning"], ev
                assert len(w.events_named("data_source_privileged")) == 1, "warned more than once"
            else:
                assert res.state == FAILED and "permission denied" in res.failure_message, res.failure_message
                assert not w.events_named("data_source_privileged")
        finally:
            w.stop()
