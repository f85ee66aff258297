"""Upsert transactions on a DuckDB source: rows written in several writes (a
writer consuming a task's batches as they settle) that become visible at once,
when the task's writer commits, or never.

- DuckUpsert, into a table that exists: one transaction across every write.
  DuckDB holds the primary-key index of the keys it adds in memory until COMMIT,
  and at COMMIT that index and the table's side by side (about 16 B a new BIGINT
  key: 10,000,000 new keys need a 160 MiB buffer pool).
- DuckStagedUpsert, a table the upsert creates (createTable, the table missing
  when the writer opened): built aside under a staging name (STAGING_PREFIX and
  a random suffix, in the table's schema), each write committed there on its
  own so its keys merge into the staging table's index as they come, and at the
  task's commit one transaction renames it to the table (or, if another writer
  created the table meanwhile, upserts it into that table and drops it). Nothing
  is visible under the table's name before that; an abort drops the staging
  table; one left by a killed Worker is dropped when the source next opens the
  file (DuckSource). 10,000,000 new keys are built at 128 MiB with a lower peak
  than one transaction needs at 160 (bench/duckdb_commit_memory.py).

Each write runs under the source's write lock, each statement bounded by
phaseIoTimeoutMs, and a cancel is decided against the COMMIT (_StatementTimer)."""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Sequence
from typing import Any

import duckdb

from blockx.plugins.data.duck_sql import db_error, execute_one, out_of_memory
from blockx.plugins.data.errors import DataSourceError
from blockx.plugins.data.idents import on_conflict, quote, quoted_table

# A staging table's name begins with this (the rest: 16 hex digits).
STAGING_PREFIX = "__blockx_stage_"


class _WriteCancelled(Exception):
    """The write was cancelled before its COMMIT: it rolls back."""


class _StatementTimer:
    """A cursor whose statements are each interrupted once they have run for
    `timeout_ms` (0 = never): the IO timeout of one write statement. It stands in
    for the cursor (execute, interrupt; `raw` is the cursor, which the source releases).

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

    @property
    def raw(self) -> duckdb.DuckDBPyConnection:
        """The cursor itself, for a statement no cancel or timeout may stop."""
        return self._cur


Groups = list[tuple[tuple[str, ...], list[list[Any]]]]


class DuckUpsert:
    """An open upsert transaction on its own cursor: ``write`` runs the statements
    of some groups in it, ``commit`` makes every write visible at once,
    ``rollback`` (or a write that fails or is cancelled) leaves nothing. The
    transaction begins with the first write. `src`: the DuckSource."""

    __slots__ = ("_src", "_target", "_key", "_cur", "_watch", "_n", "_state", "_rows")

    def __init__(self, src: Any, target: str, key: Sequence[str]) -> None:
        self._src = src
        self._target = target
        self._key = list(key)
        self._cur: _StatementTimer | None = None
        self._watch: _StatementTimer | None = None
        self._n = 0                   # temporary tables made so far (unique names)
        self._state = "new"           # new -> open -> committed | rolled back
        self._rows = 0                # rows written so far

    def _open_cursor(self) -> _StatementTimer:
        cur = self._cur = self._watch = _StatementTimer(self._src.leased_cursor(), self._src.timeout_ms)
        self._state = "open"
        return cur

    def _begin(self) -> None:
        self._open_cursor().execute("BEGIN TRANSACTION")

    def _upsert_groups(self, cur: _StatementTimer, into: str, groups: Groups) -> int:
        """Each group's rows through a temporary table into `into`, ON CONFLICT (key) DO UPDATE."""
        key = self._key
        written = 0
        for cols, values in groups:
            tmp = quote(f"__blockx_upsert_{self._n}")
            self._n += 1
            qcols = ", ".join(quote(c) for c in cols)
            execute_one(cur, f"CREATE TEMP TABLE {tmp} AS SELECT {qcols} FROM {into} LIMIT 0")
            unnests = ", ".join(f"UNNEST(${j + 1})" for j in range(len(cols)))
            execute_one(cur, f"INSERT INTO {tmp} SELECT {unnests}", values)
            execute_one(cur, f"INSERT INTO {into} ({qcols}) SELECT {qcols} FROM {tmp} {on_conflict(cols, key)}")
            execute_one(cur, f"DROP TABLE {tmp}")
            written += len(values[0]) if values else 0
        return written

    def _write(self, groups: Groups) -> int:
        if self._state == "new":
            self._begin()
        assert self._cur is not None, "_begin opened the cursor"
        written = self._write_groups(self._cur, groups)
        self._rows += written
        return written

    def _write_groups(self, cur: _StatementTimer, groups: Groups) -> int:
        return self._upsert_groups(cur, self._target, groups)

    def _end(self, commit: bool) -> None:
        cur, self._cur = self._cur, None
        if cur is None:
            return
        try:
            self._finish(cur, commit)
        finally:
            self._src.release(cur.raw)
            self._ended()

    def _finish(self, cur: _StatementTimer, commit: bool) -> None:
        if commit:
            cur.commit()           # refused (_WriteCancelled) when a cancel came first
        else:
            cur.rollback()

    def _ended(self) -> None:
        """After the cursor is released (a subclass's bookkeeping)."""

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
                                          f"({self._src.timeout_ms} ms)", retryable=True) from None
                raise (out_of_memory(exc, self._src.memory_limit_mb, self._rows) or db_error(exc)) from None
            except BaseException:
                await asyncio.to_thread(self._rollback_now)
                raise

    async def write(self, groups: Groups) -> int:
        """Upsert the groups; the rows written."""
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


class DuckStagedUpsert(DuckUpsert):
    """An upsert that creates its table, built aside under a staging name (the
    module's header): ``write`` commits each write into the staging table,
    ``commit`` renames it to the table in one transaction, ``rollback`` drops it."""

    __slots__ = ("_schema", "_table", "_columns", "_stage_name", "_stage")

    def __init__(self, src: Any, schema: str | None, table: str, key: Sequence[str],
                 columns: list[tuple[str, str]]) -> None:
        super().__init__(src, quoted_table(schema, table), key)
        self._schema = schema
        self._table = table
        self._columns = columns
        self._stage_name = STAGING_PREFIX + secrets.token_hex(8)
        self._stage = quoted_table(schema, self._stage_name)

    def _begin(self) -> None:
        cur = self._open_cursor()
        self._src.staging_opened(self._stage_name)    # before it exists: a reopen never drops it
        cols = ", ".join(f"{quote(c)} {t}" for c, t in self._columns)
        pk = ", ".join(quote(k) for k in self._key)
        execute_one(cur, f"CREATE TABLE {self._stage} ({cols}, PRIMARY KEY ({pk}))")

    def _write_groups(self, cur: _StatementTimer, groups: Groups) -> int:
        cur.execute("BEGIN TRANSACTION")
        written = self._upsert_groups(cur, self._stage, groups)
        cur.execute("COMMIT")         # refused (_WriteCancelled) when a cancel came first; the table is dropped
        return written

    def _finish(self, cur: _StatementTimer, commit: bool) -> None:
        if not commit:
            self._drop(cur)
            return
        try:
            self._publish(cur)
        except BaseException:
            # A commit that failed or was cancelled: its cursor is gone after this,
            # so the staging table is dropped here, not by the rollback that follows.
            self._drop(cur)
            raise

    def _ended(self) -> None:
        self._src.staging_closed(self._stage_name)

    def _publish(self, cur: _StatementTimer) -> None:
        cur.execute("BEGIN TRANSACTION")
        exists = cur.execute("SELECT count(*) FROM duckdb_tables() WHERE schema_name = $1 AND table_name = $2",
                             [self._schema or "main", self._table]).fetchone()[0]
        if not exists:
            execute_one(cur, f"ALTER TABLE {self._stage} RENAME TO {quote(self._table)}")
        else:
            # Another writer created the table since this one opened: merge into it.
            cols = [c for c, _ in self._columns]
            qcols = ", ".join(quote(c) for c in cols)
            execute_one(cur, f"INSERT INTO {self._target} ({qcols}) SELECT {qcols} FROM {self._stage} "
                        f"{on_conflict(cols, self._key)}")
            execute_one(cur, f"DROP TABLE {self._stage}")
        cur.commit()                  # refused (_WriteCancelled) when a cancel came first

    def _drop(self, cur: _StatementTimer) -> None:
        try:
            cur.rollback()            # a write's transaction left open by its failure, if any
        except duckdb.Error:
            pass
        drop = f"DROP TABLE IF EXISTS {self._stage}"
        try:
            # Not through the timer: a cancel that stopped the write must not stop this.
            execute_one(cur.raw, drop)
        except duckdb.Error:
            # The source was reopened under this writer (its cursor is dead): on a new one.
            # Failing that, the table is left for the next open of the file to drop.
            try:
                fresh = self._src.leased_cursor()
                try:
                    execute_one(fresh, drop)
                finally:
                    self._src.release(fresh)
            except (duckdb.Error, DataSourceError):
                pass
