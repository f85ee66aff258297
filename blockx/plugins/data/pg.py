"""A PostgreSQL data source through asyncpg: one pool per source, opened on first
use, every statement bounded by statement_timeout (phaseIoTimeoutMs).

A client's query (dbscan, the `sql` IO backend) must be a plain query
(pg_sql.check_plain_query, before anything is sent), and runs in a READ ONLY
transaction whose `SET LOCAL statement_timeout` is phaseIoTimeoutMs or the
caller's remaining budget, whichever is smaller; through the extended protocol,
which accepts exactly one statement. A connection goes back to the pool only
after `DISCARD ALL` (asyncpg's own reset keeps prepared statements and
temporary tables): no session state one client's query left can reach the
next client's (asyncpg's statement cache is off for the same reason: DISCARD
ALL drops what it would hold). The statements the upsert builds (DDL included)
take the extended protocol too (`_one`), never asyncpg's argument-less
`execute`, which sends a simple query that PostgreSQL splits into as many
statements as it holds. Scans use a server-side cursor, so a million-row result
arrives a batch at a time."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import asyncpg

from blockx.plugins.data.errors import DataSourceError
from blockx.plugins.data.idents import on_conflict, quote, quoted_table
from blockx.plugins.data.pg_sql import check_plain_query
from blockx.plugins.data.upsert import upsert_all
from blockx.plugins.data.values import BOOLEAN, INTEGER, NUMBER, TEXT, family

POOL_MIN = 0
POOL_MAX = 10
CONNECT_TIMEOUT_S = 10.0
PRIME_ROWS = 100
# Predefined roles whose members reach beyond the database's tables.
PRIVILEGED_ROLES = ("pg_read_server_files", "pg_write_server_files", "pg_execute_server_program",
                    "pg_signal_backend")

log = logging.getLogger("blockx.data")


# SQLSTATEs of failures that may pass on a retry: connection exceptions (08),
# serialization failure / deadlock (40), insufficient resources (53), operator
# intervention (57: a statement timeout or cancel, a server shutting down or
# starting), a lock not available (55P03).
_TRANSIENT_CLASSES = ("08", "40", "53", "57")
_TRANSIENT_STATES = frozenset({"55P03"})


def is_transient(exc: BaseException) -> bool:
    state = getattr(exc, "sqlstate", None) or ""
    return state[:2] in _TRANSIENT_CLASSES or state in _TRANSIENT_STATES


def _pg_error(exc: BaseException) -> DataSourceError:
    if isinstance(exc, asyncpg.PostgresError):
        return DataSourceError(f"PostgreSQL: {exc}", retryable=is_transient(exc))
    if isinstance(exc, (OSError, asyncio.TimeoutError, asyncpg.InterfaceError)):
        return DataSourceError(f"PostgreSQL unreachable or closed: {type(exc).__name__}: {exc}", retryable=True)
    return DataSourceError(f"PostgreSQL: {type(exc).__name__}: {exc}")


async def _discard_all(conn) -> None:
    """The pool's reset, after asyncpg's own (a ROLLBACK if need be): every
    session state a query could leave (prepared statements, settings, LISTENs,
    advisory locks, temporary tables, cursors) is dropped."""
    await conn.execute("DISCARD ALL")


def _gone(conn) -> bool:
    """Whether a pooled connection closed. The pool lets go of a connection the
    moment it closes (a backend ended by the server, a dropped socket), and its
    proxy then raises InterfaceError ("released back to the pool") on every call."""
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:
        return True


def _terminate(conn) -> None:
    try:
        conn.terminate()
    except asyncpg.InterfaceError:      # the pool already let go of it
        pass


async def _release(pool, conn) -> None:
    try:
        await pool.release(conn)
    except Exception:  # noqa: BLE001 - a lost connection the pool already let go of
        _terminate(conn)


def _lost(exc: BaseException) -> DataSourceError:
    """A scan whose connection went away under it (the server ended the backend,
    the network dropped): retryable, whatever asyncpg's wording."""
    return DataSourceError(f"PostgreSQL: the connection was lost during the scan ({type(exc).__name__}: {exc})",
                           retryable=True)


async def _one(conn, sql: str) -> None:
    """Run one built statement through the extended protocol (Parse/Bind/Execute):
    a text holding a second statement fails instead of running it."""
    await conn.fetch(sql)


class PgScan:
    """A server-side cursor inside a read-only transaction on a pooled connection."""

    __slots__ = ("columns", "_pool", "_conn", "_cur", "_closed", "_buf")

    def __init__(self, pool, conn, cur, columns: tuple[str, ...], first: list[tuple]):
        self._pool, self._conn, self._cur = pool, conn, cur
        self.columns = columns
        self._closed = False
        self._buf = first

    async def fetch(self, n: int) -> list[tuple]:
        if self._closed:
            return []
        if self._buf:
            out, self._buf = self._buf[:n], self._buf[n:]
            return out
        try:
            return [tuple(r) for r in await self._cur.fetch(n)]
        except asyncpg.InternalClientError as exc:
            # The protocol broke mid-operation (seen when the server ends the
            # backend between two fetches): the connection is of no further use.
            if self._conn is not None:
                _terminate(self._conn)
            raise _lost(exc) from None
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            if self._conn is None or _gone(self._conn):
                raise _lost(exc) from None
            raise _pg_error(exc) from None

    def close(self) -> None:
        """Close from synchronous code: the rollback and release run as a task."""
        if not self._closed:
            asyncio.get_running_loop().create_task(self.aclose())

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        conn, self._conn = self._conn, None
        try:
            if not _gone(conn):
                await conn.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - a broken connection: the pool discards it
            _terminate(conn)
        await _release(self._pool, conn)


class PgSource:
    kind = "postgresql"

    def __init__(self, name: str, dsn: str, *, statement_timeout_ms: int = 10_000, max_size: int = POOL_MAX):
        self.name = name
        self._dsn = dsn
        self._timeout_ms = statement_timeout_ms
        self._max_size = max_size
        self._pool: asyncpg.Pool | None = None
        self._opening: asyncio.Lock | None = None
        self._cancels: set[asyncio.Task] = set()     # pg_cancel_backend requests in flight

    async def pool(self) -> asyncpg.Pool:
        if self._pool is not None:
            return self._pool
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._pool is None:
                try:
                    self._pool = await asyncpg.create_pool(
                        self._dsn, min_size=POOL_MIN, max_size=self._max_size, timeout=CONNECT_TIMEOUT_S,
                        reset=_discard_all, statement_cache_size=0,
                        server_settings={"statement_timeout": str(self._timeout_ms),
                                         "application_name": "blockx-worker"})
                except Exception as exc:  # noqa: BLE001 - never echo the DSN
                    raise DataSourceError(f"source {self.name!r}: cannot connect to PostgreSQL: "
                                          f"{type(exc).__name__}: {exc}", retryable=True) from None
                await self._warn_if_privileged(self._pool)
        return self._pool

    async def _warn_if_privileged(self, pool: asyncpg.Pool) -> None:
        """Log ``data_source_privileged`` once when the source's role can do more than
        SQL on its tables: a read-only transaction still lets a superuser (or a member
        of PRIVILEGED_ROLES) read the database server's files (pg_read_file) or end
        its sessions, and any client that may run dbscan chooses the query."""
        try:
            async with pool.acquire(timeout=CONNECT_TIMEOUT_S) as conn:
                row = await conn.fetchrow(
                    "SELECT current_user AS who, r.rolsuper AS super, ARRAY(SELECT g.rolname FROM pg_roles g "
                    "WHERE g.rolname = ANY($1::text[]) AND pg_has_role(current_user, g.oid, 'MEMBER')) AS roles "
                    "FROM pg_roles r WHERE r.rolname = current_user", list(PRIVILEGED_ROLES))
        except Exception:  # noqa: BLE001 - a check, never a reason to fail the source
            return
        if row is None or not (row["super"] or row["roles"]):
            return
        what = "a superuser" if row["super"] else "a member of " + ", ".join(row["roles"])
        log.warning("data_source_privileged", extra={"event": "data_source_privileged", "fields": {
            "source": self.name, "role": row["who"], "privileges": what,
            "warning": f"source {self.name!r} connects to PostgreSQL as {row['who']!r}, {what}: every client "
                       "that may submit a dbscan task can read the database server's files (pg_read_file) "
                       "and signal its sessions, read-only transaction or not; connect as a role with only "
                       "the table grants clients may use"}})

    # --- reads ----------------------------------------------------------------------

    def scan_timeout_ms(self, budget_ms: int | None) -> int:
        """The statement timeout of one scan: phaseIoTimeoutMs, or the caller's
        remaining budget when it is smaller (at least 1 ms: 0 would mean none)."""
        if budget_ms is None:
            return self._timeout_ms
        return max(1, min(self._timeout_ms, int(budget_ms)))

    async def open_scan(self, query: str, params: Sequence[Any], *, timeout_ms: int | None = None) -> PgScan:
        """A client's query, refused unless plain (check_plain_query), opened in
        a READ ONLY transaction bounded by scan_timeout_ms(timeout_ms)."""
        check_plain_query(query)
        limit = self.scan_timeout_ms(timeout_ms)
        pool = await self.pool()
        try:
            conn = await pool.acquire(timeout=CONNECT_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001
            raise _pg_error(exc) from None
        try:
            # One round trip, a text the Worker built (an int): no client text in it.
            await conn.execute(f"BEGIN TRANSACTION READ ONLY; SET LOCAL statement_timeout = {limit}")
            stmt = await conn.prepare(query)
            cur = await stmt.cursor(*params)
            # The first rows now: an error the statement only raises when it runs
            # (a write in the read-only transaction, a division by zero) fails here.
            first = [tuple(r) for r in await cur.fetch(PRIME_ROWS)]
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                # A query may still run: do not wait for it. Closing the socket alone
                # leaves the server running it (it notices only when it next writes
                # to the client), so the backend is also asked to cancel it, from a
                # connection of its own, in the background.
                if not _gone(conn):
                    self._cancel_backend_later(conn.get_server_pid())
                _terminate(conn)
            else:
                try:
                    if not _gone(conn):
                        await conn.execute("ROLLBACK")
                except Exception:  # noqa: BLE001
                    _terminate(conn)
            lost = _gone(conn)
            await _release(pool, conn)
            if isinstance(exc, Exception):
                raise (_lost(exc) if lost and not isinstance(exc, asyncpg.PostgresError) else _pg_error(exc)) from None
            raise
        return PgScan(pool, conn, cur, tuple(a.name for a in stmt.get_attributes()), first)

    async def fetch_rows(self, query: str, params: Sequence[Any], max_rows: int, *,
                         timeout_ms: int | None = None) -> tuple[tuple[str, ...], list]:
        scan = await self.open_scan(query, params, timeout_ms=timeout_ms)
        try:
            rows = await scan.fetch(max_rows + 1)
        finally:
            await scan.aclose()
        return scan.columns, rows

    def _cancel_backend_later(self, pid: int) -> None:
        task = asyncio.get_running_loop().create_task(self._cancel_backend(pid))
        self._cancels.add(task)
        task.add_done_callback(self._cancels.discard)

    async def _cancel_backend(self, pid: int) -> None:
        """pg_cancel_backend(pid) on a fresh connection (the pool may be exhausted);
        best effort: the statement timeout bounds the query anyway."""
        try:
            conn = await asyncpg.connect(self._dsn, timeout=CONNECT_TIMEOUT_S,
                                         server_settings={"application_name": "blockx-worker"})
            try:
                await conn.execute("SELECT pg_cancel_backend($1)", pid)
            finally:
                await conn.close()
        except Exception as exc:  # noqa: BLE001 - never echo the DSN
            log.debug("source %r: cancelling backend %d failed: %s", self.name, pid, type(exc).__name__)

    # --- writes ---------------------------------------------------------------------

    async def table_columns(self, schema: str | None, table: str) -> dict[str, str] | None:
        pool = await self.pool()
        try:
            rows = await pool.fetch(
                "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                "WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped "
                "ORDER BY a.attnum", quoted_table(schema, table))
        except Exception as exc:  # noqa: BLE001
            raise _pg_error(exc) from None
        return {r[0]: r[1] for r in rows} or None

    async def upsert(self, schema: str | None, table: str, key: Sequence[str],
                     groups: list[tuple[tuple[str, ...], list[list[Any]]]],
                     create: list[tuple[str, str]] | None = None,
                     types: dict[str, str] | None = None) -> int:
        """Write every group (columns, column-major values) in one transaction:
        COPY into a temporary table, then INSERT ... ON CONFLICT from it."""
        return await upsert_all(self.open_upsert(schema, table, key, create, types), groups)

    def open_upsert(self, schema: str | None, table: str, key: Sequence[str],
                    create: list[tuple[str, str]] | None = None,
                    types: dict[str, str] | None = None) -> PgUpsert:
        """One upsert transaction that takes its rows in several writes (a writer
        consuming a task's batches as they settle) and commits once."""
        types = dict(types or {})
        if create:
            types.update(create)
        return PgUpsert(self, quoted_table(schema, table), key, create, types)

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), 5.0)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                pool.terminate()



class PgUpsert:
    """An open upsert transaction on one pooled connection: ``write`` COPYs some
    groups into a temporary table and upserts them from it (each statement bounded
    by statement_timeout), ``commit`` makes every write visible at once,
    ``rollback`` (or a write that fails or is cancelled) leaves nothing and gives
    the connection back. The connection and the transaction are taken at the first
    write; createTable's CREATE is its first statement."""

    __slots__ = ("_src", "_target", "_key", "_create", "_types", "_pool", "_conn", "_tr", "_n", "_state")

    def __init__(self, src: PgSource, target: str, key: Sequence[str], create: list[tuple[str, str]] | None,
                 types: dict[str, str]) -> None:
        self._src = src
        self._target = target
        self._key = list(key)
        self._create = create
        self._types = types
        self._pool: Any = None        # asyncpg Pool, connection and transaction, from the first write
        self._conn: Any = None
        self._tr: Any = None
        self._n = 0
        self._state = "new"           # new -> open -> committed | rolled back

    @property
    def state(self) -> str:
        """new, open, committed or rolled back."""
        return self._state

    async def _begin(self) -> None:
        self._pool = pool = await self._src.pool()
        self._conn = conn = await pool.acquire(timeout=CONNECT_TIMEOUT_S)
        self._state = "open"
        self._tr = conn.transaction()
        await self._tr.start()
        if self._create:
            cols = ", ".join(f"{quote(c)} {t}" for c, t in self._create)
            pk = ", ".join(quote(k) for k in self._key)
            await _one(conn, f"CREATE TABLE IF NOT EXISTS {self._target} ({cols}, PRIMARY KEY ({pk}))")

    async def _write(self, groups) -> int:
        if self._state == "new":
            await self._begin()
        conn, types, key, target = self._conn, self._types, self._key, self._target
        written = 0
        for cols, values in groups:
            tmp = f"__blockx_upsert_{self._n}"
            self._n += 1
            # Values of families asyncpg encodes natively travel as such;
            # the rest arrive as text and PostgreSQL casts them.
            native = {c: family(types[c])[0] in (INTEGER, BOOLEAN, TEXT) or
                      (family(types[c])[0] == NUMBER and family(types[c])[1] == 0) for c in cols}
            defs = ", ".join(f"{quote(c)} {types[c] if native[c] else 'text'}" for c in cols)
            await _one(conn, f"CREATE TEMP TABLE {quote(tmp)} ({defs}) ON COMMIT DROP")
            await conn.copy_records_to_table(tmp, records=zip(*values), columns=list(cols))
            qcols = ", ".join(quote(c) for c in cols)
            sel = ", ".join(quote(c) if native[c] else f"{quote(c)}::{types[c]}" for c in cols)
            await _one(conn, f"INSERT INTO {target} ({qcols}) SELECT {sel} FROM {quote(tmp)} "
                             f"{on_conflict(cols, key)}")
            await _one(conn, f"DROP TABLE {quote(tmp)}")    # a long transaction keeps no pile of them
            written += len(values[0]) if values else 0
        return written

    async def write(self, groups: list[tuple[tuple[str, ...], list[list[Any]]]]) -> int:
        """Upsert the groups inside the transaction; the rows written."""
        if self._state not in ("new", "open"):
            raise DataSourceError(f"PostgreSQL: the upsert transaction is already {self._state}")
        try:
            return await self._write(groups)
        except BaseException as exc:
            await self._abandon(isinstance(exc, asyncio.CancelledError))
            if isinstance(exc, DataSourceError) or not isinstance(exc, Exception):
                raise
            raise _pg_error(exc) from None

    async def commit(self) -> None:
        if self._state == "new":
            self._state = "committed"     # nothing was written: nothing to commit
            return
        if self._state != "open":
            raise DataSourceError(f"PostgreSQL: the upsert transaction is already {self._state}")
        commit = asyncio.ensure_future(self._tr.commit())
        try:
            try:
                await asyncio.shield(commit)
            except asyncio.CancelledError:
                # A cancel that comes once the COMMIT was sent cannot undo it: the
                # write is reported as done (a cancel before it rolled back in write()).
                await asyncio.wait({commit})
                if commit.cancelled():
                    raise
                commit.result()
        except BaseException as exc:
            await self._abandon(isinstance(exc, asyncio.CancelledError))
            if not isinstance(exc, Exception):
                raise
            raise _pg_error(exc) from None
        self._state = "committed"
        # The connection goes back to the pool (a reset query on the server); a
        # cancel meanwhile cannot undo the COMMIT, so it does not end the call
        # cancelled either: the write is done.
        release = asyncio.ensure_future(self._release())
        try:
            await asyncio.shield(release)
        except asyncio.CancelledError:
            await asyncio.wait({release})

    async def _abandon(self, cancelled: bool) -> None:
        """Roll back and give the connection back; a cancelled statement may still
        run on it, so then the connection is closed instead of waited for."""
        if self._state != "open":
            return
        self._state = "rolled back"
        conn = self._conn
        if conn is None:
            return
        if cancelled:
            # A statement may still run (or wait on a lock): do not wait for it.
            # Closing the socket alone leaves the server running it until it next
            # writes to the client, so the backend is also asked to cancel it.
            if not _gone(conn):
                self._src._cancel_backend_later(conn.get_server_pid())
            _terminate(conn)
        else:
            try:
                if not _gone(conn):
                    await self._tr.rollback()
            except Exception:  # noqa: BLE001 - a broken connection: the pool discards it
                _terminate(conn)
        await self._release()

    async def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await _release(self._pool, conn)

    async def rollback(self) -> None:
        """Undo every write (no-op once committed or rolled back)."""
        if self._state == "new":
            self._state = "rolled back"
            return
        await self._abandon(False)
