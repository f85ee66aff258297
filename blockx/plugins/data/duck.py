"""An embedded DuckDB data source.

One database instance per source, opened on first use (so a Worker whose tasks
never touch `local` creates no file). Every operation runs on its own cursor in a
worker thread, so the event loop never waits on DuckDB. DuckDB has one writer:
writes are serialised by an asyncio lock per source, and readers run beside them.

Named sources are opened with external access off and their configuration locked:
a query can read the database's own tables but no file on the Worker's disk.
Bundles (files) are read and written by `bundle_files`: a private in-memory
database per operation that may open exactly the files the builder or writer
resolved (allowed_paths), with external access off and its configuration locked,
so no SQL, however built, can read or write any other file.

Read-only: DuckDB has no read-only transaction, so a query is accepted only when it
parses to exactly one SELECT statement. Every statement the Worker builds runs
through `execute_one`, which refuses a text that parses to several statements:
DuckDB's `execute` would run them all."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

import duckdb

from blockx.plugins.data.errors import DataSourceError
from blockx.plugins.data.idents import on_conflict, quote, quoted_table
from blockx.plugins.data.upsert import upsert_all
from blockx.plugins.data.urls import MEMORY

log = logging.getLogger("blockx.data")


def _db_error(exc: Exception) -> DataSourceError:
    return DataSourceError("DuckDB: " + " ".join(str(exc).split()))


def _out_of_memory(exc: Exception, limit_mb: int, rows: int) -> DataSourceError | None:
    """A clear error for a write DuckDB's buffer pool could not hold (its own text
    suggests `SET memory_limit`, which no task can run on a locked source). `rows`:
    the rows the transaction had taken when it failed."""
    text = str(exc)
    if not (isinstance(exc, duckdb.OutOfMemoryException) or "could not allocate block" in text
            or "failed to pin block" in text):
        return None
    what = " ".join(text.split("Possible solutions")[0].split())
    limit = f"{limit_mb} MiB" if limit_mb else "0: DuckDB's own"
    return DataSourceError(
        f"DuckDB: {what}: the transaction's {rows} rows need more than dataPlane.duckdbMemoryLimitMb "
        f"({limit}) holds. DuckDB keeps the primary-key index of the rows one transaction adds in memory, "
        "and at COMMIT that index and the table's side by side (with a BIGINT key about 16 bytes a new key: "
        "10,000,000 new keys commit at 160 MiB, not at 128); raise dataPlane.duckdbMemoryLimitMb, or split "
        "the task so that each writes fewer rows")


def check_select(query: object) -> str:
    """The query, if it is exactly one SELECT statement; DataSourceError otherwise."""
    if not isinstance(query, str) or not query.strip():
        raise DataSourceError("the query must be a non-empty string")
    try:
        stmts = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise _db_error(exc) from None
    if len(stmts) != 1:
        raise DataSourceError(f"only one statement is accepted, got {len(stmts)}")
    if stmts[0].type != duckdb.StatementType.SELECT:
        raise DataSourceError(f"only a read-only SELECT is accepted, got a {stmts[0].type.name} statement")
    return query


def execute_one(cur: Any, sql: str, params: Any = None) -> duckdb.DuckDBPyConnection:
    """Run `sql` if it is exactly one statement; DataSourceError otherwise."""
    try:
        n = len(duckdb.extract_statements(sql))
    except duckdb.Error as exc:
        raise _db_error(exc) from None
    if n != 1:
        raise DataSourceError(f"DuckDB: refused a built statement that parses to {n} statements")
    return cur.execute(sql, params) if params is not None else cur.execute(sql)


def bundle_files(paths: Sequence[str], *, spill_dir: str | None = None, memory_limit_mb: int = 0) -> DuckSource:
    """A private source for one bundle operation: in memory, able to open only `paths`.
    With `spill_dir` (a writer spooling a streamed task), its buffer pool is bounded
    by `memory_limit_mb` (0 = DuckDB's own) and its tables spill to that directory."""
    return DuckSource("<bundle>", MEMORY, allowed_paths=paths, spill_dir=spill_dir,
                      memory_limit_mb=memory_limit_mb)


class DuckScan:
    """An open result being fetched in batches."""

    __slots__ = ("columns", "_cur", "_closed", "_owner", "_source")

    def __init__(self, cur: duckdb.DuckDBPyConnection, owner: DuckSource | None = None,
                 source: DuckSource | None = None):
        self._cur = cur
        self.columns = tuple(d[0] for d in (cur.description or ()))
        self._closed = False
        self._owner = owner       # a private source that ends with this scan
        self._source = source     # the source the scan reads (told when DuckDB invalidates it)

    async def fetch(self, n: int) -> list[tuple]:
        if self._closed:
            return []
        try:
            return await asyncio.to_thread(self._cur.fetchmany, n)
        except duckdb.Error as exc:
            if isinstance(exc, duckdb.FatalException) and self._source is not None:
                self._source.drop_invalidated()
            raise _db_error(exc) from None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._cur.interrupt()
        except Exception:  # noqa: BLE001 - nothing running
            pass
        try:
            self._cur.close()
        except Exception:  # noqa: BLE001
            pass
        if self._owner is not None:
            self._owner.close()

    async def aclose(self) -> None:
        """close(), with a private source's instance closed in a thread (it takes
        milliseconds, never the event loop's)."""
        owner, self._owner = self._owner, None
        self.close()
        if owner is not None:
            await asyncio.to_thread(owner.close)


class _WriteCancelled(Exception):
    """The write was cancelled before its COMMIT: it rolls back."""


class _StatementTimer:
    """A cursor whose statements are each interrupted once they have run for
    `timeout_ms` (0 = never): the IO timeout of one write statement. It stands in
    for the cursor (execute, interrupt, close).

    It also decides a cancel against the COMMIT, under one lock: ``cancel``
    before ``commit`` began wins (every later statement, the COMMIT included,
    raises and the write rolls back; DuckDB's interrupt alone is lost when it
    lands between two statements, and the COMMIT would then go through);
    ``cancel`` after it lost (returns False): the rows are being committed."""

    __slots__ = ("_cur", "_timeout_s", "fired", "_lock", "_cancelled", "_committing")

    def __init__(self, cur: duckdb.DuckDBPyConnection, timeout_ms: int):
        self._cur = cur
        self._timeout_s = timeout_ms / 1000.0
        self.fired = False
        self._lock = threading.Lock()
        self._cancelled = False
        self._committing = False

    def cancel(self) -> bool:
        """True: the write will not commit; False: its COMMIT already began."""
        with self._lock:
            if self._committing:
                return False
            self._cancelled = True
        self._cur.interrupt()
        return True

    def commit(self) -> None:
        with self._lock:
            if self._cancelled:
                raise _WriteCancelled()
            self._committing = True
        self._cur.execute("COMMIT")

    def rollback(self) -> None:
        self._cur.execute("ROLLBACK")

    def _fire(self) -> None:
        self.fired = True
        self._cur.interrupt()

    def execute(self, *args):
        if self._cancelled:
            raise _WriteCancelled()
        if self._timeout_s <= 0:
            return self._cur.execute(*args)
        timer = threading.Timer(self._timeout_s, self._fire)
        timer.start()
        try:
            return self._cur.execute(*args)
        finally:
            timer.cancel()

    def interrupt(self) -> None:
        self._cur.interrupt()

    def close(self) -> None:
        self._cur.close()


class DuckSource:
    kind = "duckdb"

    def __init__(self, name: str, path: str, *, allowed_paths: Sequence[str] | None = None,
                 statement_timeout_ms: int = 0, memory_limit_mb: int = 0, spill_dir: str | None = None):
        self.name = name
        self.path = path
        # DuckDB's buffer pool, which runs inside the Worker (0 = DuckDB's own, 80% of
        # the RAM); past it a file-backed database evicts and spills to its own
        # temporary files. An in-memory database keeps DuckDB's own limit, unless
        # it is given a directory to spill its tables to (`spill_dir`). Every
        # instance runs its allocator's background threads, which hand the memory a
        # large write freed back to the system within about a second (without them
        # a Worker stayed 60-135 MB above its pre-task RSS after a big upsert).
        self._memory_limit_mb = memory_limit_mb if path != MEMORY or spill_dir else 0
        self._spill_dir = spill_dir
        self._allowed = list(allowed_paths) if allowed_paths is not None else None
        self._timeout_ms = statement_timeout_ms     # phaseIoTimeoutMs per write statement; 0 = none
        self._db: duckdb.DuckDBPyConnection | None = None
        self._open_lock = threading.Lock()
        self._write_lock: asyncio.Lock | None = None

    # --- connection -----------------------------------------------------------------

    def _connect(self) -> duckdb.DuckDBPyConnection:
        with self._open_lock:
            if self._db is None:
                created = self.path != MEMORY and not os.path.exists(self.path)
                if self.path != MEMORY:
                    os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
                try:
                    if self._allowed is None:
                        config: dict[str, Any] = {"enable_external_access": False, "lock_configuration": True,
                                                  "allocator_background_threads": True}
                        if self._memory_limit_mb:
                            config["memory_limit"] = f"{self._memory_limit_mb}MiB"
                        self._db = duckdb.connect(self.path, config=config)
                    else:
                        # allowed_paths can only be set once the database runs, and
                        # before external access goes off; then nothing can change.
                        db = duckdb.connect(MEMORY)
                        try:
                            if self._spill_dir:
                                db.execute("SET temp_directory = $1", [self._spill_dir])
                                if self._memory_limit_mb:
                                    db.execute(f"SET memory_limit = '{int(self._memory_limit_mb)}MiB'")
                            db.execute("SET allocator_background_threads = true")
                            db.execute("SET allowed_paths = $1", [self._allowed])
                            db.execute("SET enable_external_access = false")
                            db.execute("SET lock_configuration = true")
                        except BaseException:
                            db.close()
                            raise
                        self._db = db
                except duckdb.Error as exc:
                    raise DataSourceError(f"source {self.name!r}: cannot open DuckDB: {exc}") from None
                if created:
                    os.chmod(self.path, 0o600)      # DuckDB creates it with the umask's mode
            return self._db

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A new connection to this source's database (one per operation and thread)."""
        return self._connect().cursor()

    def drop_invalidated(self) -> bool:
        """After an error DuckDB may have invalidated the whole database (a COMMIT
        that ran out of memory does: "the database must be restarted"), and then
        every statement on it fails. When it has, close it so that the next use
        opens the file again, which recovers what was committed; True if so.
        Any thread; a cursor still open on the old database keeps failing."""
        with self._open_lock:
            db = self._db
            if db is None:
                return False
            try:
                db.execute("SELECT 1").fetchall()
                return False
            except duckdb.Error:
                self._db = None
        log.warning("data_source_reopened", extra={"event": "data_source_reopened", "fields": {
            "source": self.name, "reason": "DuckDB invalidated the database after an error; the next use opens it "
                                            "again, with what was committed before"}})
        try:
            db.close()
        except duckdb.Error:
            pass
        return True

    @property
    def write_lock(self) -> asyncio.Lock:
        if self._write_lock is None:
            self._write_lock = asyncio.Lock()
        return self._write_lock

    # --- reads ----------------------------------------------------------------------

    async def open_scan(self, query: str, params: Sequence[Any], *, owned: bool = False) -> DuckScan:
        """An open result of one SELECT; `owned`: this source closes with the scan."""
        check_select(query)
        cur = await asyncio.to_thread(self.cursor)
        fut = asyncio.ensure_future(asyncio.to_thread(cur.execute, query, list(params)))
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            # A timeout or the task's end: stop the query rather than let its
            # thread run on; the cursor goes once the thread has returned.
            cur.interrupt()
            def close_after(f: asyncio.Future) -> None:
                if not f.cancelled():
                    f.exception()       # retrieved, so an error of the interrupted query is not reported
                cur.close()
            fut.add_done_callback(close_after)
            raise
        except duckdb.Error as exc:
            cur.close()
            if isinstance(exc, duckdb.FatalException):
                self.drop_invalidated()
            raise _db_error(exc) from None
        except BaseException:
            cur.close()
            raise
        return DuckScan(cur, self if owned else None, self)

    async def fetch_rows(self, query: str, params: Sequence[Any], max_rows: int) -> tuple[tuple[str, ...], list]:
        scan = await self.open_scan(query, params)
        try:
            rows = await scan.fetch(max_rows + 1)
        finally:
            scan.close()
        return scan.columns, rows

    # --- writes ---------------------------------------------------------------------

    async def table_columns(self, schema: str | None, table: str) -> dict[str, str] | None:
        def run():
            cur = self.cursor()
            try:
                return cur.execute(
                    "SELECT column_name, data_type FROM information_schema.columns "
                    "WHERE table_name = ? AND table_schema = ? ORDER BY ordinal_position",
                    [table, schema or "main"]).fetchall()
            finally:
                cur.close()
        rows = await asyncio.to_thread(run)
        return {n: t for n, t in rows} or None

    async def upsert(self, schema: str | None, table: str, key: Sequence[str],
                     groups: list[tuple[tuple[str, ...], list[list[Any]]]],
                     create: list[tuple[str, str]] | None = None, types: dict[str, str] | None = None) -> int:
        """Write every group (columns, column-major values) in one transaction."""
        return await upsert_all(self.open_upsert(schema, table, key, create), groups)

    def open_upsert(self, schema: str | None, table: str, key: Sequence[str],
                    create: list[tuple[str, str]] | None = None,
                    types: dict[str, str] | None = None) -> DuckUpsert:
        """One upsert transaction that takes its rows in several writes (a writer
        consuming a task's batches as they settle) and commits once."""
        return DuckUpsert(self, quoted_table(schema, table), key, create)

    def close(self) -> None:
        with self._open_lock:
            db, self._db = self._db, None
        if db is not None:
            db.close()

    async def aclose(self) -> None:
        self.close()


class DuckUpsert:
    """An open upsert transaction on its own cursor: ``write`` runs the statements
    of some groups in it (under the source's write lock, each statement bounded by
    phaseIoTimeoutMs), ``commit`` makes every write visible at once, ``rollback``
    (or a write that fails or is cancelled) leaves nothing. The transaction begins
    with the first write; createTable's CREATE is its first statement."""

    __slots__ = ("_src", "_target", "_key", "_create", "_cur", "_watch", "_n", "_state", "_rows")

    def __init__(self, src: DuckSource, target: str, key: Sequence[str],
                 create: list[tuple[str, str]] | None) -> None:
        self._src = src
        self._target = target
        self._key = list(key)
        self._create = create
        self._cur: _StatementTimer | None = None
        self._watch: _StatementTimer | None = None
        self._n = 0                   # temporary tables made so far (unique names)
        self._state = "new"           # new -> open -> committed | rolled back
        self._rows = 0                # rows written in the transaction so far

    def _begin(self) -> None:
        cur = self._cur = self._watch = _StatementTimer(self._src.cursor(), self._src._timeout_ms)
        cur.execute("BEGIN TRANSACTION")
        self._state = "open"
        if self._create:
            cols = ", ".join(f"{quote(c)} {t}" for c, t in self._create)
            pk = ", ".join(quote(k) for k in self._key)
            execute_one(cur, f"CREATE TABLE IF NOT EXISTS {self._target} ({cols}, PRIMARY KEY ({pk}))")

    def _write(self, groups: list[tuple[tuple[str, ...], list[list[Any]]]]) -> int:
        if self._state == "new":
            self._begin()
        cur = self._cur
        target, key = self._target, self._key
        written = 0
        for cols, values in groups:
            tmp = quote(f"__blockx_upsert_{self._n}")
            self._n += 1
            qcols = ", ".join(quote(c) for c in cols)
            execute_one(cur, f"CREATE TEMP TABLE {tmp} AS SELECT {qcols} FROM {target} LIMIT 0")
            unnests = ", ".join(f"UNNEST(${j + 1})" for j in range(len(cols)))
            execute_one(cur, f"INSERT INTO {tmp} SELECT {unnests}", values)
            execute_one(cur, f"INSERT INTO {target} ({qcols}) SELECT {qcols} FROM {tmp} "
                        f"{on_conflict(cols, key)}")
            execute_one(cur, f"DROP TABLE {tmp}")
            written += len(values[0]) if values else 0
        self._rows += written
        return written

    def _end(self, commit: bool) -> None:
        cur, self._cur = self._cur, None
        if cur is None:
            return
        try:
            if commit:
                cur.commit()       # refused (_WriteCancelled) when a cancel came first
            else:
                cur.rollback()
        finally:
            cur.close()

    async def _run(self, fn, *args):
        if self._state not in ("new", "open"):
            raise DataSourceError(f"DuckDB: the upsert transaction is already {self._state}")
        async with self._src.write_lock:
            fut = asyncio.ensure_future(asyncio.to_thread(fn, *args))
            try:
                return await asyncio.shield(fut)
            except asyncio.CancelledError:
                # A cancelled writer (the task ended): stop the statement, and keep the write lock
                # until its thread has returned and the transaction is rolled back, so the
                # next writer starts clean. The cancel and the COMMIT are decided against each
                # other (_StatementTimer): a cancel once the COMMIT began cannot undo it, and
                # the write is then reported as done.
                cur = self._cur if self._cur is not None else self._watch
                won = cur.cancel() if cur is not None else True
                await asyncio.wait({fut})
                if won or fut.cancelled() or fut.exception() is not None:
                    await asyncio.to_thread(self._rollback_now)
                    raise
                return fut.result()
            except duckdb.Error as exc:
                await asyncio.to_thread(self._rollback_now)
                await asyncio.to_thread(self._src.drop_invalidated)
                if self._watch is not None and self._watch.fired:
                    raise DataSourceError(f"DuckDB: a statement ran longer than phaseIoTimeoutMs "
                                          f"({self._src._timeout_ms} ms)", retryable=True) from None
                raise (_out_of_memory(exc, self._src._memory_limit_mb, self._rows) or _db_error(exc)) from None
            except BaseException:
                await asyncio.to_thread(self._rollback_now)
                raise

    async def write(self, groups: list[tuple[tuple[str, ...], list[list[Any]]]]) -> int:
        """Upsert the groups inside the transaction; the rows written."""
        return await self._run(self._write, groups)

    async def commit(self) -> None:
        if self._state == "new":
            self._state = "committed"     # nothing was written: nothing to commit
            return
        await self._run(self._end, True)
        self._state = "committed"

    def _rollback_now(self) -> None:
        if self._state != "open":
            return
        self._state = "rolled back"
        try:
            self._end(False)
        except duckdb.Error:
            pass

    async def rollback(self) -> None:
        """Undo every write (no-op once committed or rolled back)."""
        if self._state != "open":
            if self._state == "new":
                self._state = "rolled back"
            return
        async with self._src.write_lock:
            await asyncio.to_thread(self._rollback_now)
