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
Details: {"rows": n, "path": "out/.../id.parquet"}."""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote as url_quote

import duckdb
import orjson

from blockx.plugins.data.duck import execute_one
from blockx.plugins.data.errors import DataSourceError
from blockx.plugins.data.idents import quote, shown
from blockx.plugins.plugin_api import PluginResult, parse_config
from blockx.plugins.writers.table_rows import BadRows, check_field, iter_rows

NAME = "bundleWrite"
_KEYS = ("dir",)
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


def columns_of(rows: Iterable[tuple[int, dict]]) -> tuple[list[str], list[list[Any]], int]:
    """Column names in first-seen order, their column-major values (null where a
    row lacks the field) and the row count, decoded one row at a time."""
    cols: dict[str, list[Any]] = {}
    folded: dict[str, str] = {}
    n = 0
    for out_i, row in rows:
        for k, v in row.items():
            col = cols.get(k)
            if col is None:
                where = f"row {n} (output {out_i})"
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


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class BundleWritePlugin:
    name = NAME
    NEEDS_DATA = True

    def __init__(self, data: Any):
        self.data = data

    async def execute(self, config: bytes, outputs: list[bytes], ctx: Any = None) -> PluginResult:
        try:
            cfg = parse_config(NAME, config)
            extra = sorted(k for k in cfg if k not in _KEYS)
            if extra:
                raise ValueError(f"unknown config key(s) {', '.join(map(repr, extra))} (allowed: dir)")
            directory = self.data.bundle_path(cfg.get("dir"), "dir")
        except (ValueError, DataSourceError) as exc:
            return PluginResult(NAME, False, f"{NAME}: {exc}")
        task_id = getattr(ctx, "task_id", "") or "task"
        final = os.path.join(directory, file_name(task_id))
        rel = os.path.relpath(final, self.data.bundle_root)
        try:
            names, values, n = await asyncio.to_thread(columns_of, iter_rows(outputs))
        except BadRows as exc:
            return PluginResult(NAME, False, f"{NAME}: nothing written: {exc}")
        try:
            if not n:
                await asyncio.to_thread(self._remove, final)
                return PluginResult(NAME, True, "no rows; no file", orjson.dumps({"rows": 0, "path": None}))
            await self._write_bounded(directory, final, names, values, getattr(ctx, "io_timeout_ms", 0))
        except _WriteTimedOut as exc:
            return PluginResult(NAME, False, f"{NAME}: nothing written: {exc}", retryable=True)
        except (duckdb.Error, OSError) as exc:
            return PluginResult(NAME, False, f"{NAME}: nothing written: {' '.join(str(exc).split())}")
        except DataSourceError as exc:
            return PluginResult(NAME, False, f"{NAME}: nothing written: {exc.message}")
        return PluginResult(NAME, True, f"{n} rows written to {rel}", orjson.dumps({"rows": n, "path": rel}))

    @staticmethod
    def _remove(final: str) -> None:
        try:
            os.unlink(final)
        except FileNotFoundError:
            pass

    async def _write_bounded(self, directory: str, final: str, names: list[str], values: list[list[Any]],
                             timeout_ms: int) -> None:
        """_write in a thread, bounded by phaseIoTimeoutMs: writing the file is one
        IO operation, and a timeout fails the task, retryable. A timeout, or the
        task's end cancelling the plugin, abandons the write: the thread's query
        is interrupted and it never renames its file into place afterwards
        (unless the rename had already happened)."""
        guard = _WriteGuard()
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
               guard: "_WriteGuard") -> None:
        make_dirs(directory)
        tmp = os.path.join(directory, f".{os.path.basename(final)}.{secrets.token_hex(6)}.tmp")
        table = quote("__blockx_bundle_" + secrets.token_hex(6))
        # The file exists, 0640, before DuckDB writes it (in place: no temporary
        # of DuckDB's own, which the private database could not open anyway).
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE))
        files = self.data.files([tmp])          # may open the temporary file, nothing else
        try:
            cur = files.cursor()
            guard.cursor = cur
            sel = ", ".join(f"UNNEST(${i + 1}) AS {quote(n)}" for i, n in enumerate(names))
            execute_one(cur, f"CREATE TEMP TABLE {table} AS SELECT {sel}", values)
            path = tmp.replace("'", "''")
            execute_one(cur, f"COPY {table} TO '{path}' (FORMAT PARQUET, USE_TMP_FILE false)")
            cur.close()
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            if guard.rename(tmp, final):
                _fsync_dir(directory)
        finally:
            files.close()
            if os.path.exists(tmp):
                os.unlink(tmp)


class _WriteTimedOut(Exception):
    pass


class _WriteGuard:
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
