"""bundleWrite: a task's outputs as one Parquet file, `<dir>/<taskId>.parquet`
(the task id escaped for a file name, a long one cut and made unique: file_name).

    {"dir": "out/2026-11"}

`dir` is relative to the Worker's bundle root (dataPlane.bundleRoot); a path that
leaves it is refused. Each output is a JSON object (or an array of objects) whose
fields are columns; a field a row lacks is null; DuckDB infers the column types
(nested objects become structs). A field name must be a plain SQL identifier (the
rule of plugins.data.idents): a bad one fails the task naming the row and the
field, and nothing is written. The file is written under a temporary name by a
private DuckDB that may open that one file and no other, synced, and renamed over
the task's previous file, so a reader never sees half a file and a retried task
replaces its own output. Files are created 0640 and the directories the writer
makes 0700. A task without outputs removes its previous file and writes none.
Details: {"rows": n, "path": "out/.../id.parquet"}.

Streamed (a streaming builder; plugin_api; BundleStream): each settled batch is
decoded and checked as above (row numbers count from the task's first row),
typed by DuckDB as the whole task would be over those rows, and appended to one
table of a private in-memory DuckDB that may open the task's temporary file and
no other, whose buffer pool is bounded by dataPlane.duckdbMemoryLimitMb and
spills into the task's work directory: ``.<file>.<random>.tmp.d`` beside the
final file, 0700, holding the temporary file (0640, O_EXCL|O_NOFOLLOW) and the
spill, and locked while it exists, so that a Worker's start can sweep what a
killed one left (plugins.data.work_files). ``commit`` copies the table into the temporary file, syncs it and renames
it over the task's previous file; ``abort`` (a failed, timed-out or cancelled
task) removes the work directory: no file, no temporary, the previous file as it
was. `"stream": false` keeps the writer after the Calls phase, over every output.

Streamed column types (column_rule): over one batch DuckDB's inference is the
whole task's. Across batches a column keeps the type of the first batch with a
value in it; a later batch may only fill in what was null so far (a null column,
a null field of a struct, a list's null elements) and widen numbers (BOOLEAN <
INTEGER < BIGINT < UBIGINT/HUGEINT < DOUBLE, as DuckDB widens them), at any depth
of structs and lists: converting the earlier rows then gives the very values the
whole-task inference does. Any other change (numbers then strings, a struct that
gains a field) cannot be reproduced without every output at hand: the task fails
PLUGIN_FAILED naming the field, its two types and the rows, rather than write a
file typed or valued differently; `"stream": false` writes such a task with the
whole-task inference. The streamed file's row groups are bounded in bytes too
(ROW_GROUP_MAX_BYTES), so its row-group layout may differ; its schema and rows
do not."""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import shutil
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote as url_quote

import duckdb
import orjson

from blockx.plugins.data.duck_sql import execute_one
from blockx.plugins.data.errors import DataSourceError
from blockx.plugins.data.idents import quote, shown
from blockx.plugins.data.work_files import create_dir, create_file, release
from blockx.plugins.plugin_api import STREAM_KEYS, PluginError, PluginResult, parse_config, stream_options
from blockx.plugins.writers.table_rows import BadRows, check_field, iter_rows

NAME = "bundleWrite"
_KEYS = ("dir",) + STREAM_KEYS
FILE_MODE = 0o640
DIR_MODE = 0o700
MAX_NAME_CHARS = 160        # of the escaped task id in a file name (with the temporary's affixes < 255)


def file_name(task_id: str) -> str:
    """The task id escaped (every byte but letters, digits and ``-_.~`` as %XX); an
    escaped id over MAX_NAME_CHARS (a 256-byte id may escape to 768, past the 255
    bytes of a file name) is cut and ends with ``%%`` and the id's SHA-256: still
    one name per task id, since ``%%`` is in no escaped id."""
    safe = url_quote(task_id or "task", safe="-_")
    if len(safe) > MAX_NAME_CHARS:
        digest = hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()
        safe = safe[:MAX_NAME_CHARS - 2 - len(digest)] + "%%" + digest
    return safe + ".parquet"


def columns_of(rows: Iterable[tuple[int, dict]], folded: dict[str, str] | None = None,
               first_row: int = 0) -> tuple[list[str], list[list[Any]], int]:
    """Column names in first-seen order, their column-major values (null where a
    row lacks the field) and the row count, decoded one row at a time.
    ``folded`` (lower-cased name -> name) carries the case check across the
    batches of a streamed task; ``first_row``: the task's number of the first row."""
    cols: dict[str, list[Any]] = {}
    if folded is None:
        folded = {}
    n = 0
    for out_i, row in rows:
        for k, v in row.items():
            col = cols.get(k)
            if col is None:
                where = f"row {first_row + n} (output {out_i})"
                check_field(where, k)
                other = folded.setdefault(k.lower(), k)
                if other != k:
                    raise BadRows(f"{where}: field {shown(k)} differs from field {shown(other)} only in case "
                                  "(DuckDB column names ignore case)")
                col = cols[k] = [None] * n
            col.append(v)
        n += 1
        for col in cols.values():
            if len(col) < n:
                col.append(None)
    return list(cols), list(cols.values()), n


def make_dirs(directory: str) -> None:
    """Create `directory` and its missing parents, each 0700 (an existing one keeps
    its mode: the operator's bundle root is theirs)."""
    missing = []
    d = directory
    while not os.path.isdir(d):
        missing.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:
            pass


def fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


fsync_dir = fsync_file


def remove_file(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _config(cfg: dict) -> None:
    extra = sorted(k for k in cfg if k not in _KEYS)
    if extra:
        raise ValueError(f"unknown config key(s) {', '.join(map(repr, extra))} (allowed: {', '.join(_KEYS)})")
    try:
        stream_options(NAME, cfg)
    except PluginError as exc:
        raise ValueError(str(exc).removeprefix(f"{NAME}: ")) from None


class BundleWritePlugin:
    name = NAME
    NEEDS_DATA = True

    def __init__(self, data: Any):
        self.data = data

    async def execute(self, config: bytes, outputs: list[bytes], ctx: Any = None) -> PluginResult:
        try:
            directory, final, rel = self._target(config, ctx)
        except (ValueError, DataSourceError) as exc:
            return PluginResult(NAME, False, f"{NAME}: {exc}")
        try:
            names, values, n = await asyncio.to_thread(columns_of, iter_rows(outputs))
        except BadRows as exc:
            return PluginResult(NAME, False, f"{NAME}: nothing written: {exc}")
        try:
            if not n:
                await asyncio.to_thread(remove_file, final)
                return PluginResult(NAME, True, "no rows; no file", orjson.dumps({"rows": 0, "path": None}))
            await self._write_bounded(directory, final, names, values, getattr(ctx, "io_timeout_ms", 0))
        except _WriteTimedOut as exc:
            return PluginResult(NAME, False, f"{NAME}: nothing written: {exc}", retryable=True)
        except (duckdb.Error, OSError) as exc:
            return PluginResult(NAME, False, f"{NAME}: nothing written: {' '.join(str(exc).split())}")
        except DataSourceError as exc:
            return PluginResult(NAME, False, f"{NAME}: nothing written: {exc.message}")
        return PluginResult(NAME, True, f"{n} rows written to {rel}", orjson.dumps({"rows": n, "path": rel}))

    def _target(self, config: bytes, ctx: Any) -> tuple[str, str, str]:
        """(directory, final path, path relative to the bundle root) of a config;
        ValueError or DataSourceError for a bad one."""
        try:
            cfg = parse_config(NAME, config)
        except PluginError as exc:
            raise ValueError(str(exc).removeprefix(f"{NAME}: ")) from None
        _config(cfg)
        directory = self.data.bundle_path(cfg.get("dir"), "dir")
        task_id = getattr(ctx, "task_id", "") or "task"
        final = os.path.join(directory, file_name(task_id))
        return directory, final, os.path.relpath(final, self.data.bundle_root)

    def open_stream(self, config: bytes, ctx: Any = None) -> BundleStream:
        """One task's streamed write (BundleStream)."""
        try:
            directory, final, rel = self._target(config, ctx)
        except (ValueError, DataSourceError) as exc:
            raise PluginError(f"{NAME}: {exc}") from None
        return BundleStream(self.data, directory, final, rel, getattr(ctx, "io_timeout_ms", 0))

    async def _write_bounded(self, directory: str, final: str, names: list[str], values: list[list[Any]],
                             timeout_ms: int) -> None:
        """_write in a thread, bounded by phaseIoTimeoutMs: writing the file is one
        IO operation, and a timeout fails the task, retryable. A timeout, or the
        task's end cancelling the plugin, abandons the write: the thread's query
        is interrupted and it never renames its file into place afterwards
        (unless the rename had already happened)."""
        guard = WriteGuard()
        fut = asyncio.ensure_future(asyncio.to_thread(self._write, directory, final, names, values, guard))
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout_ms / 1000.0 if timeout_ms > 0 else None)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            renamed = guard.abandon()
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())   # its end is not awaited
            if isinstance(exc, asyncio.CancelledError):
                raise
            if not renamed:
                raise _WriteTimedOut(f"writing the file took longer than phaseIoTimeoutMs ({timeout_ms} ms); "
                                     "raise phaseIoTimeoutMs (PHASE_IO_TIMEOUT_MS) for larger bundles") from None

    def _write(self, directory: str, final: str, names: list[str], values: list[list[Any]],
               guard: "WriteGuard") -> None:
        make_dirs(directory)
        tmp = os.path.join(directory, f".{os.path.basename(final)}.{secrets.token_hex(6)}.tmp")
        table = quote("__blockx_bundle_" + secrets.token_hex(6))
        # The file exists, 0640, before DuckDB writes it (in place: no temporary
        # of DuckDB's own, which the private database could not open anyway).
        held = create_file(tmp, FILE_MODE)      # locked until renamed or removed (work_files.sweep)
        files = None
        try:
            files = self.data.files([tmp])      # may open the temporary file, nothing else
            cur = files.cursor()
            guard.cursor = cur
            sel = ", ".join(f"UNNEST(${i + 1}) AS {quote(n)}" for i, n in enumerate(names))
            execute_one(cur, f"CREATE TEMP TABLE {table} AS SELECT {sel}", values)
            path = tmp.replace("'", "''")
            execute_one(cur, f"COPY {table} TO '{path}' (FORMAT PARQUET, USE_TMP_FILE false)")
            cur.close()
            fsync_file(tmp)
            if guard.rename(tmp, final):
                fsync_dir(directory)
        finally:
            try:
                if files is not None:
                    files.close()
                if os.path.exists(tmp):
                    os.unlink(tmp)
            finally:
                release(held)


class _WriteTimedOut(Exception):
    pass


class WriteGuard:
    """Between the event loop (which may abandon a write) and the thread doing
    it: once abandoned, the thread renames nothing; the rename and the abandon
    exclude each other, so exactly one of them wins."""

    __slots__ = ("_lock", "abandoned", "renamed", "cursor")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.abandoned = False
        self.renamed = False
        self.cursor: Any = None

    def abandon(self) -> bool:
        """No rename from now on; True when the file was already renamed."""
        with self._lock:
            self.abandoned = True
            renamed = self.renamed
        cur = self.cursor
        if cur is not None and not renamed:
            try:
                cur.interrupt()
            except Exception:  # noqa: BLE001 - nothing running any more
                pass
        return renamed

    def rename(self, tmp: str, final: str) -> bool:
        with self._lock:
            if self.abandoned:
                return False
            os.replace(tmp, final)
            self.renamed = True
            return True


# --- streamed ----------------------------------------------------------------------------

NULL_TYPE = '"NULL"'            # DuckDB's type of a column whose every value is null
# A Python value of each numeric type DuckDB gives a JSON number or boolean: the
# widest of two is what DuckDB's own inference makes of one value of each.
NUMERIC_WITNESS = {"BOOLEAN": True, "INTEGER": 1, "BIGINT": 2**40, "UBIGINT": 2**63, "HUGEINT": -2**63 - 5,
                   "DOUBLE": 2.5}
ROW_GROUP_MAX_BYTES = 8 << 20          # of a row group in the file, at most 1/8 of the spool's buffer pool
_TABLE = "rows"
_BATCH = "batch"


class TypeConflict(BadRows):
    pass


class _Mismatch(Exception):
    pass


_widest: dict[tuple[str, str], str] = {}
_widest_lock = threading.Lock()


def widest_number(a: str, b: str) -> str:
    """The type DuckDB infers for a list holding a value of numeric type a and one
    of b (cached)."""
    key = (a, b) if a <= b else (b, a)
    with _widest_lock:
        got = _widest.get(key)
        if got is None:
            con = duckdb.connect()
            try:
                con.execute("CREATE TABLE w AS SELECT UNNEST($1) AS v", [[NUMERIC_WITNESS[a], NUMERIC_WITNESS[b]]])
                got = _widest[key] = str(con.table("w").types[0])
            finally:
                con.close()
    return got


Tree = Any       # a leaf's SQL type name | ("struct", ((name, Tree), ...)) | ("list", Tree)


def type_tree(t: Any) -> Tree:
    """A DuckDB type as a tree of its structs and lists."""
    if t.id == "struct":
        return ("struct", tuple((n, type_tree(c)) for n, c in t.children))
    if t.id == "list":
        return ("list", type_tree(t.children[0][1]))
    return str(t)


def type_sql(t: Tree) -> str:
    if isinstance(t, str):
        return t
    if t[0] == "list":
        return type_sql(t[1]) + "[]"
    return "STRUCT(" + ", ".join(f"{quote(n)} {type_sql(c)}" for n, c in t[1]) + ")"


def merge_types(kept: Tree, batch: Tree) -> Tree:
    """The type over the rows of both, when casting the kept rows to it gives the
    values DuckDB's inference over every row would: a null type (a field null in
    every row so far) takes the other's, a number widens (widest_number), structs
    of the same fields and lists merge their parts; _Mismatch otherwise."""
    if kept == batch or batch == NULL_TYPE:
        return kept
    if kept == NULL_TYPE:
        return batch
    if isinstance(kept, str) or isinstance(batch, str):
        if isinstance(kept, str) and isinstance(batch, str) and kept in NUMERIC_WITNESS and batch in NUMERIC_WITNESS:
            return widest_number(kept, batch)
        raise _Mismatch
    if kept[0] != batch[0]:
        raise _Mismatch
    if kept[0] == "list":
        return ("list", merge_types(kept[1], batch[1]))
    if [n for n, _ in kept[1]] != [n for n, _ in batch[1]]:
        raise _Mismatch
    return ("struct", tuple((n, merge_types(k, b)) for (n, k), (_, b) in zip(kept[1], batch[1])))


def column_rule(column: str, kept: Tree, batch: Tree, rows: str) -> Tree:
    """The type of a column holding `kept` so far once a batch typed `batch` (over
    `rows`) is appended; TypeConflict when the streamed file would differ from
    the whole-task one."""
    try:
        return merge_types(kept, batch)
    except _Mismatch:
        raise TypeConflict(
            f"field {shown(column)} is {type_sql(kept)} in earlier rows and {type_sql(batch)} in {rows}: a "
            f"streamed {NAME} keeps each column's type from the first batch with a value in it, and only "
            "fills in nulls and widens numbers (BOOLEAN < INTEGER < BIGINT < UBIGINT/HUGEINT < DOUBLE) in later ones; "
            'give the field one type in the function\'s outputs, or set "stream": false in the result handler '
            "config (types inferred over the whole task, every output held until the task ends)") from None


class _Spool:
    """The thread side: the work directory, the private DuckDB, the table's types."""

    def __init__(self, data: Any, directory: str, name: str, guard: WriteGuard) -> None:
        make_dirs(directory)
        self.work = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.tmp.d")
        self._held: int | None = create_dir(self.work, DIR_MODE)   # locked until removed (work_files.sweep)
        self.files: Any = None
        try:
            self.tmp = os.path.join(self.work, name)
            os.close(os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE))
            # may open the temporary file, nothing else; spills into the work directory
            self.files = data.files([self.tmp], spill_dir=os.path.join(self.work, "spill"))
            self.cur = self.files.cursor()
        except BaseException:
            self.close()
            raise
        guard.cursor = self.cur
        self.types: dict[str, Tree] = {}      # column -> its type so far, in first-seen order

    def append(self, names: list[str], values: list[list[Any]], rows: str) -> None:
        cur = self.cur
        sel = ", ".join(f"UNNEST(${i + 1}) AS {quote(n)}" for i, n in enumerate(names))
        # Typed by DuckDB over this batch, exactly as the whole task's table is typed.
        execute_one(cur, f"CREATE TABLE {quote(_BATCH)} AS SELECT {sel}", values)
        rel = cur.table(_BATCH)
        batch = [(c, type_tree(t)) for c, t in zip(rel.columns, rel.types)]
        del rel
        if not self.types:
            execute_one(cur, f"ALTER TABLE {quote(_BATCH)} RENAME TO {quote(_TABLE)}")
            self.types = dict(batch)
            return
        types = self.types
        changes: list[tuple[str, Tree, bool]] = []
        for col, t in batch:
            kept = types.get(col)
            if kept is None:
                changes.append((col, t, True))        # a field first met in this batch: its column last
                continue
            new = column_rule(col, kept, t, rows)
            if new != kept:
                changes.append((col, new, False))
        for col, t, added in changes:
            change = "ADD COLUMN" if added else "ALTER COLUMN"
            execute_one(cur, f"ALTER TABLE {quote(_TABLE)} {change} {quote(col)} {'' if added else 'TYPE '}"
                             f"{type_sql(t)}")
            types[col] = t
        execute_one(cur, f"INSERT INTO {quote(_TABLE)} BY NAME SELECT * FROM {quote(_BATCH)}")
        execute_one(cur, f"DROP TABLE {quote(_BATCH)}")

    def finish(self, final: str, guard: WriteGuard, memory_limit_mb: int) -> bool:
        """The table into the temporary file, synced, renamed over `final`."""
        path = self.tmp.replace("'", "''")
        group = min(ROW_GROUP_MAX_BYTES, (memory_limit_mb << 20) // 8) if memory_limit_mb > 0 else ROW_GROUP_MAX_BYTES
        # Row groups bounded in bytes as well as rows: the default (122,880 rows)
        # of wide rows would not fit the spool's buffer pool.
        execute_one(self.cur, f"COPY {quote(_TABLE)} TO '{path}' (FORMAT PARQUET, USE_TMP_FILE false, "
                              f"ROW_GROUP_SIZE_BYTES {int(group)})")
        fsync_file(self.tmp)
        if guard.rename(self.tmp, final):
            fsync_dir(os.path.dirname(final))
            return True
        return False

    def close(self) -> None:
        files, self.files = self.files, None
        if files is not None:
            try:
                files.close()
            except duckdb.Error:
                pass
        shutil.rmtree(self.work, ignore_errors=True)
        held, self._held = self._held, None
        release(held)


class BundleStream:
    """One task's streamed bundleWrite (blockx.plugins.plugin_api.WriterStream)."""

    def __init__(self, data: Any, directory: str, final: str, rel: str, io_timeout_ms: int) -> None:
        self._data = data
        self._dir = directory
        self._final = final
        self._rel = rel
        self._timeout_ms = io_timeout_ms
        self._guard = WriteGuard()
        self._spool: _Spool | None = None
        self._folded: dict[str, str] = {}     # lower-cased field -> the field (across batches)
        self._outputs = 0                      # outputs seen (the index of the next batch's first)
        self._rows = 0                         # rows seen (the number of the next batch's first)
        self._busy: asyncio.Future | None = None
        self._state = "open"                   # open -> committed | aborted

    async def write(self, outputs: list[bytes]) -> None:
        if self._state != "open":
            raise PluginError(f"{NAME}: the streamed write is already {self._state}")
        first = self._rows
        try:
            names, values, n = await asyncio.to_thread(columns_of, iter_rows(outputs, self._outputs),
                                                       self._folded, first)
        except BadRows as exc:
            raise PluginError(f"{NAME}: nothing written: {exc}") from None
        self._outputs += len(outputs)
        if not n:
            return
        self._rows += n
        rows = f"rows {first}-{first + n - 1}"
        await self._run(self._append, names, values, rows)

    def _append(self, names: list[str], values: list[list[Any]], rows: str) -> None:
        if self._spool is None:
            self._spool = _Spool(self._data, self._dir, os.path.basename(self._final), self._guard)
        self._spool.append(names, values, rows)

    async def _run(self, fn, *args) -> Any:
        """fn in a thread, bounded by phaseIoTimeoutMs; a cancel or a timeout
        abandons it (its statement interrupted, no rename after it) and waits for
        the thread, so nothing runs on behind the task's end."""
        if self._guard.abandoned:
            raise PluginError(f"{NAME}: nothing written: the write was abandoned")
        fut = self._busy = asyncio.ensure_future(asyncio.to_thread(fn, *args))
        timeout = self._timeout_ms / 1000.0 if self._timeout_ms > 0 else None
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            self._guard.abandon()
            await asyncio.wait({fut})
            if not fut.cancelled():
                fut.exception()                 # retrieved: the interrupted statement's error is expected
            if isinstance(exc, asyncio.CancelledError):
                raise
            err = PluginError(f"{NAME}: nothing written: writing took longer than phaseIoTimeoutMs "
                              f"({self._timeout_ms} ms); raise phaseIoTimeoutMs (PHASE_IO_TIMEOUT_MS) "
                              "for larger bundles")
            err.retryable = True
            raise err from None
        except BadRows as exc:
            raise PluginError(f"{NAME}: nothing written: {exc}") from None
        except duckdb.OutOfMemoryException as exc:
            limit = getattr(self._data, "duckdb_memory_limit_mb", 0)
            raise PluginError(f"{NAME}: nothing written: {' '.join(str(exc).split()[:12])}: the streamed write's "
                              f"spool is bounded by dataPlane.duckdbMemoryLimitMb ({limit} MiB); raise it, or set "
                              '"stream": false in the result handler config') from None
        except (duckdb.Error, OSError) as exc:
            raise PluginError(f"{NAME}: nothing written: {' '.join(str(exc).split())}") from None
        except DataSourceError as exc:
            raise PluginError(f"{NAME}: nothing written: {exc.message}") from None
        finally:
            self._busy = None

    async def commit(self) -> PluginResult:
        if self._state != "open":
            return PluginResult(NAME, False, f"{NAME}: the streamed write is already {self._state}")
        try:
            if self._spool is None:
                await asyncio.to_thread(remove_file, self._final)
                self._state = "committed"
                return PluginResult(NAME, True, "no rows; no file", orjson.dumps({"rows": 0, "path": None}))
            spool = self._spool
            limit = int(getattr(self._data, "duckdb_memory_limit_mb", 0) or 0)
            if not await self._run(spool.finish, self._final, self._guard, limit):
                return PluginResult(NAME, False, f"{NAME}: nothing written: the write was abandoned")
        except PluginError as exc:
            return PluginResult(NAME, False, str(exc), retryable=exc.retryable)
        finally:
            if self._state == "open" and self._busy is None:
                await self._close()
        self._state = "committed"
        n = self._rows
        return PluginResult(NAME, True, f"{n} rows written to {self._rel}",
                            orjson.dumps({"rows": n, "path": self._rel}))

    async def abort(self) -> None:
        """Leave no file and no work directory (after a commit: nothing undone)."""
        if self._state == "open":
            self._state = "aborted"
        self._guard.abandon()
        busy = self._busy
        if busy is not None:
            await asyncio.wait({busy})
        await self._close()

    async def _close(self) -> None:
        spool, self._spool = self._spool, None
        if spool is not None:
            await asyncio.to_thread(spool.close)
