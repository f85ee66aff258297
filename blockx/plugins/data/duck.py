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

Queries and built statements are checked by duck_sql (a client's query on a named
source: one side-effect-free SELECT; a built one: one statement); upserts are
duck_upsert's transactions. A client's scan is bounded like a PostgreSQL one:
each step (the execute, each fetch) is interrupted (DuckDB's interrupt(), from
the event loop's timer while the step runs in its thread) once it has run
phaseIoTimeoutMs, or the caller's remaining budget when that is smaller, and
fails retryable naming the bound. A table an upsert creates is built aside
under a staging name until its task commits: when this source opens a file, it
drops the staging tables no live writer of this process holds (a killed
Worker's; DuckDB lets one process open a file, so no other Worker's can be
there) and logs `data_source_staging_dropped`."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import duckdb

from blockx.plugins.data.duck_sql import check_client_select, check_select, db_error, execute_one
from blockx.plugins.data.duck_upsert import STAGING_PREFIX, DuckStagedUpsert, DuckUpsert
from blockx.plugins.data.errors import DataSourceError
from blockx.plugins.data.idents import quoted_table
from blockx.plugins.data.upsert import upsert_all
from blockx.plugins.data.urls import MEMORY

log = logging.getLogger("blockx.data")


def bundle_files(paths: Sequence[str], *, spill_dir: str | None = None, memory_limit_mb: int = 0) -> DuckSource:
    """A private source for one bundle operation: in memory, able to open only `paths`.
    With `spill_dir` (a writer spooling a streamed task), its buffer pool is bounded
    by `memory_limit_mb` (0 = DuckDB's own) and its tables spill to that directory."""
    return DuckSource("<bundle>", MEMORY, allowed_paths=paths, spill_dir=spill_dir,
                      memory_limit_mb=memory_limit_mb)


def _close_quietly(db: duckdb.DuckDBPyConnection) -> None:
    """Close an instance this source let go of (an invalidated one may fail to)."""
    try:
        db.close()
    except duckdb.Error:
        pass


class _Interrupter:
    """Interrupts `cur` once `limit_ms` has passed while `fut` (one DuckDB step in
    its thread) still runs; `fired` says whether it did. The timer runs on the
    event loop; interrupt() is DuckDB's way to stop a query from another thread."""

    __slots__ = ("_cur", "_fut", "_handle", "fired")

    def __init__(self, cur: duckdb.DuckDBPyConnection, fut: asyncio.Future, limit_ms: int) -> None:
        self._cur, self._fut = cur, fut
        self.fired = False
        self._handle = (asyncio.get_running_loop().call_later(limit_ms / 1000, self._fire)
                        if limit_ms > 0 else None)

    def _fire(self) -> None:
        if not self._fut.done():
            self.fired = True
            try:
                self._cur.interrupt()
            except Exception:  # noqa: BLE001 - a closed cursor: nothing runs
                pass

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()


class DuckScan:
    """An open result being fetched in batches, each fetch bounded by `limit_ms`."""

    __slots__ = ("columns", "_cur", "_closed", "_owner", "_source", "_limit_ms", "_timeout")

    def __init__(self, cur: duckdb.DuckDBPyConnection, owner: DuckSource | None = None,
                 source: DuckSource | None = None, limit_ms: int = 0, timeout: DataSourceError | None = None):
        self._cur = cur
        self.columns = tuple(d[0] for d in (cur.description or ()))
        self._closed = False
        self._owner = owner       # a private source that ends with this scan
        self._source = source     # the source the scan reads (told when DuckDB invalidates it)
        self._limit_ms = limit_ms
        self._timeout = timeout   # the error of a fetch interrupted at limit_ms

    async def fetch(self, n: int) -> list[tuple]:
        if self._closed:
            return []
        fut = asyncio.ensure_future(asyncio.to_thread(self._cur.fetchmany, n))
        timer = _Interrupter(self._cur, fut, self._limit_ms)
        try:
            return await fut
        except duckdb.Error as exc:
            if timer.fired and self._timeout is not None:
                raise self._timeout from None
            if isinstance(exc, duckdb.FatalException) and self._source is not None:
                self._source.drop_invalidated()
            raise db_error(exc) from None
        finally:
            timer.cancel()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._cur.interrupt()
        except Exception:  # noqa: BLE001 - nothing running
            pass
        if self._source is not None:
            self._source.release(self._cur)
        else:
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


class DuckSource:
    kind = "duckdb"

    def __init__(self, name: str, path: str, *, allowed_paths: Sequence[str] | None = None,
                 statement_timeout_ms: int = 0, memory_limit_mb: int = 0, spill_dir: str | None = None,
                 idle_close_ms: int = 0):
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
        self._timeout_ms = statement_timeout_ms     # phaseIoTimeoutMs per write statement and scan step; 0 = none
        self._db: duckdb.DuckDBPyConnection | None = None
        self._open_lock = threading.Lock()
        self._write_lock: asyncio.Lock | None = None
        self._live_staging: set[str] = set()     # staging tables of this process's open writers
        # Idle close (dataPlane.duckdbIdleCloseMs; 0 = never): a named file source that no
        # operation has used for that long closes its instance, and the next use opens the
        # file again (about 20 ms). DuckDB keeps the blocks a large write or scan touched
        # cached in its buffer pool for as long as it is open (about 50 MB after a
        # 10,000,000-row table, measured); closing hands them back. `_leases`: cursors
        # handed out by `leased_cursor` and not yet released; `_idle_since`: when the
        # last one was (monotonic seconds; None while any is out).
        self._idle_close_s = idle_close_ms / 1000.0 if path != MEMORY and allowed_paths is None else 0.0
        self._leases = 0
        self._idle_since: float | None = None

    @property
    def timeout_ms(self) -> int:
        return self._timeout_ms

    @property
    def memory_limit_mb(self) -> int:
        return self._memory_limit_mb

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
                elif self.path != MEMORY:
                    self._drop_stale_staging(self._db)
            return self._db

    def _drop_stale_staging(self, db: duckdb.DuckDBPyConnection) -> None:
        """Drop the staging tables no live writer holds (under the open lock)."""
        try:
            found = db.execute("SELECT schema_name, table_name FROM duckdb_tables() WHERE starts_with(table_name, $1)",
                               [STAGING_PREFIX]).fetchall()
            stale = [(s, t) for s, t in found if t not in self._live_staging]
            for schema, table in stale:
                execute_one(db, f"DROP TABLE IF EXISTS {quoted_table(schema, table)}")   # catalog names, quoted
        except (duckdb.Error, DataSourceError) as exc:
            log.warning("data_source_staging_dropped", extra={"event": "data_source_staging_dropped", "fields": {
                "source": self.name, "error": " ".join(str(exc).split())}})
            return
        if stale:
            log.info("data_source_staging_dropped", extra={"event": "data_source_staging_dropped", "fields": {
                "source": self.name, "tables": len(stale),
                "reason": "tables a killed Worker's writers were building; their tasks committed nothing"}})

    def staging_opened(self, name: str) -> None:
        with self._open_lock:
            self._live_staging.add(name)

    def staging_closed(self, name: str) -> None:
        with self._open_lock:
            self._live_staging.discard(name)

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A new connection to this source's database (one per operation and thread),
        not counted as a use: the source may close under it once idle (tests and
        one-off reads; the Worker's operations use `leased_cursor`)."""
        return self._connect().cursor()

    def leased_cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor that keeps the source open until `release`d."""
        with self._open_lock:
            self._leases += 1
            self._idle_since = None
        try:
            return self._connect().cursor()
        except BaseException:
            self._unlease()
            raise

    def release(self, cur: duckdb.DuckDBPyConnection) -> None:
        """Close a `leased_cursor` (once)."""
        try:
            cur.close()
        except duckdb.Error:
            pass
        finally:
            self._unlease()

    def _unlease(self) -> None:
        with self._open_lock:
            self._leases -= 1
            if self._leases == 0:
                self._idle_since = time.monotonic()

    def close_if_idle(self, now: float) -> bool:
        """Close the instance if no leased cursor has been out for dataPlane.duckdbIdleCloseMs
        (`now`: time.monotonic()); True if it closed. It takes milliseconds: run it in a thread."""
        with self._open_lock:
            if (self._db is None or not self._idle_close_s or self._leases or self._idle_since is None
                    or now - self._idle_since < self._idle_close_s or self._live_staging):
                return False
            db, self._db = self._db, None
            self._idle_since = None
        _close_quietly(db)
        return True

    @property
    def is_open(self) -> bool:
        return self._db is not None

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
        _close_quietly(db)
        return True

    @property
    def write_lock(self) -> asyncio.Lock:
        if self._write_lock is None:
            self._write_lock = asyncio.Lock()
        return self._write_lock

    # --- reads ----------------------------------------------------------------------

    def scan_timeout_ms(self, budget_ms: int | None) -> int:
        """The bound of each step of one scan: phaseIoTimeoutMs (0 = none), or the
        caller's remaining budget when it is smaller (at least 1 ms)."""
        if budget_ms is None:
            return self._timeout_ms
        budget = max(1, int(budget_ms))
        return min(self._timeout_ms, budget) if self._timeout_ms else budget

    def _timeout_error(self, limit_ms: int) -> DataSourceError:
        what = (f"phaseIoTimeoutMs ({limit_ms} ms)" if limit_ms == self._timeout_ms
                else f"{limit_ms} ms (the call's remaining budget)")
        return DataSourceError(f"DuckDB: the query ran longer than {what} and was interrupted", retryable=True)

    async def open_scan(self, query: str, params: Sequence[Any], *, owned: bool = False,
                        timeout_ms: int | None = None) -> DuckScan:
        """An open result of one SELECT; `owned`: this source closes with the scan.
        On a named source the query is a client's (check_client_select); a
        bundle source's private instance runs only what the Worker built."""
        if self._allowed is None:
            check_client_select(query)
        else:
            check_select(query)
        limit = self.scan_timeout_ms(timeout_ms)
        timeout = self._timeout_error(limit) if limit else None
        cur = await asyncio.to_thread(self.leased_cursor)
        fut = asyncio.ensure_future(asyncio.to_thread(cur.execute, query, list(params)))
        timer = _Interrupter(cur, fut, limit)
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            # A timeout or the task's end: stop the query rather than let its
            # thread run on; the cursor goes once the thread has returned.
            cur.interrupt()
            def close_after(f: asyncio.Future) -> None:
                if not f.cancelled():
                    f.exception()       # retrieved, so an error of the interrupted query is not reported
                self.release(cur)
            fut.add_done_callback(close_after)
            raise
        except duckdb.Error as exc:
            self.release(cur)
            if timer.fired and timeout is not None:
                raise timeout from None
            if isinstance(exc, duckdb.FatalException):
                self.drop_invalidated()
            raise db_error(exc) from None
        except BaseException:
            self.release(cur)
            raise
        finally:
            timer.cancel()
        return DuckScan(cur, self if owned else None, self, limit, timeout)

    async def fetch_rows(self, query: str, params: Sequence[Any], max_rows: int, *,
                         timeout_ms: int | None = None) -> tuple[tuple[str, ...], list]:
        scan = await self.open_scan(query, params, timeout_ms=timeout_ms)
        try:
            rows = await scan.fetch(max_rows + 1)
        finally:
            scan.close()
        return scan.columns, rows

    # --- writes ---------------------------------------------------------------------

    async def table_columns(self, schema: str | None, table: str) -> dict[str, str] | None:
        def run():
            cur = self.leased_cursor()
            try:
                return cur.execute(
                    "SELECT column_name, data_type FROM information_schema.columns "
                    "WHERE table_name = ? AND table_schema = ? ORDER BY ordinal_position",
                    [table, schema or "main"]).fetchall()
            finally:
                self.release(cur)
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
        if create:
            return DuckStagedUpsert(self, schema, table, key, create)
        return DuckUpsert(self, quoted_table(schema, table), key)

    def close(self) -> None:
        with self._open_lock:
            db, self._db = self._db, None
        if db is not None:
            db.close()

    async def aclose(self) -> None:
        self.close()


