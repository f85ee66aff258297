"""bundleScan: a streaming builder over a bundle, a set of Parquet or CSV files.

    {"files": "data/2026-11-*.parquet", "functionId": "f", "per": "row",
     "columns": ["id", "x"], "args": "row"}

`files` is a glob (or a list of globs) relative to the Worker's bundle root
(dataPlane.bundleRoot); a path that leaves the root is refused, and so is a match
that resolves outside it (a symbolic link). The globs are expanded in a worker
thread, never on the event loop, and stop at dataPlane.bundleMaxFiles matches.
Files are read in name order, rows in file order, through a private DuckDB that
may open exactly the matched files and no other.
  per "row" (default): one call per row, as dbscan ("row": one object argument,
                       "columns": positional); `columns` selects and orders them.
  per "file":          one call per file, f({"path": "data/x.parquet", "rows": n}),
                       for functions that process a whole file.
No file matching, a missing column or an unreadable file fails the Builder phase."""

from __future__ import annotations

import asyncio
import glob
import itertools
import os
from typing import Any

from blockx.json_types import json_type
from blockx.plugins.builder_api import (BuilderError, CallSpec, parse_payload, reject_unknown,
                                        require_function_id, require_object)
from blockx.plugins.builders.db_scan import builder_error, check_args_mode, row_to_call
from blockx.plugins.builders.scan_stream import ScanStream
from blockx.plugins.data.errors import DataSourceError
from blockx.plugins.data.idents import check_ident, quote
from blockx.plugins.data.values import dumps

NAME = "bundleScan"
GLOB_CHARS = frozenset("*?[")
READERS = {".parquet": "read_parquet", ".csv": "read_csv_auto", ".tsv": "read_csv_auto"}


def reader_of(path: str) -> str:
    p = path.lower()
    if p.endswith(".gz"):
        p = p[:-3]
    return READERS.get(os.path.splitext(p)[1], "")


def sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def file_list_sql(paths: list[str]) -> str:
    return "[" + ", ".join(sql_str(p) for p in paths) + "]"


class FileRows:
    """The per-file 'scan': one (relative path, row count) a fetch, counted by DuckDB."""

    __slots__ = ("columns", "_files", "_root", "_pos", "_src")

    def __init__(self, src: Any, root: str, files: list[str]):
        self.columns = ("path", "rows")
        self._src, self._root, self._files, self._pos = src, root, files, 0

    async def fetch(self, n: int) -> list[tuple]:
        out: list[Any] = []
        while self._pos < len(self._files) and len(out) < n:
            path = self._files[self._pos]
            self._pos += 1
            cols, rows = await self._src.fetch_rows(
                f"SELECT count(*) FROM {reader_of(path)}({sql_str(path)})", [], 1)
            out.append((os.path.relpath(path, self._root), int(rows[0][0])))
        return out

    async def aclose(self) -> None:
        self._pos = len(self._files)
        await asyncio.to_thread(self._src.close)


class BundleScanBuilder:
    name = NAME
    NEEDS_DATA = True

    def __init__(self, data: Any):
        self.data = data

    def build(self, payload: bytes, ctx: Any = None) -> list[CallSpec]:  # pragma: no cover - never called
        raise BuilderError(f"{NAME} is an async streaming builder (open_stream)")

    def _patterns(self, spec: Any) -> list[tuple[str, str]]:
        """(pattern as written, absolute pattern under the root) of each glob."""
        patterns = [spec] if isinstance(spec, str) else spec
        if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
            raise BuilderError(f"{NAME}: files must be a glob or a non-empty array of globs, "
                               f"got {json_type(spec)}")
        out = []
        for pat in patterns:
            try:
                out.append((pat, self.data.bundle_path(pat, "files")))
            except DataSourceError as exc:
                raise BuilderError(f"{NAME}: {exc.message}") from None
        return out

    def _files(self, patterns: list[tuple[str, str]]) -> list[str]:
        """The matched files in order (blocking: run in a thread). At most
        bundle_max_files entries are ever taken from the globs."""
        root = self.data.bundle_root
        cap = self.data.bundle_max_files
        found: dict[str, None] = {}
        taken = 0
        for pat, full in patterns:
            hits = list(itertools.islice(glob.iglob(full), cap + 1 - taken))
            taken += len(hits)
            if taken > cap:
                raise BuilderError(f"{NAME}: the files globs match more than {cap} entries "
                                   "(dataPlane.bundleMaxFiles, BUNDLE_MAX_FILES); narrow them")
            matches = sorted(m for m in hits if os.path.isfile(m))
            if not matches:
                raise BuilderError(f"{NAME}: no file matches {pat!r} under the bundle root")
            for m in matches:
                rel = os.path.relpath(m, root)
                real = os.path.realpath(m)
                if not real.startswith(root + os.sep):
                    raise BuilderError(f"{NAME}: {rel!r} resolves outside the bundle root")
                if GLOB_CHARS.intersection(real):
                    raise BuilderError(f"{NAME}: {rel!r}: a file name holding * ? or [ cannot be read")
                if not reader_of(real):
                    raise BuilderError(f"{NAME}: {rel!r} is neither "
                                       "Parquet nor CSV (.parquet, .csv, .tsv, optionally .gz)")
                found.setdefault(real)
        return list(found)

    async def open_stream(self, payload: bytes, ctx: Any = None) -> ScanStream:
        data = require_object(NAME, parse_payload(NAME, payload))
        reject_unknown(NAME, data, ("files", "functionId", "per", "columns", "args"))
        fid = require_function_id(NAME, data.get("functionId"))
        mode = check_args_mode(NAME, data)
        per = data.get("per", "row")
        if per not in ("row", "file"):
            raise BuilderError(f'{NAME}: per must be "row" or "file", got {per!r}')
        columns = data.get("columns")
        if columns is not None:
            if not isinstance(columns, list) or not columns:
                raise BuilderError(f"{NAME}: columns must be a non-empty array of column names")
            try:
                for c in columns:
                    check_ident("column", c)
            except ValueError as exc:
                raise BuilderError(f"{NAME}: {exc}") from None
        if data.get("files") is None:
            raise BuilderError(f'{NAME}: files is missing; expected a glob such as "data/*.parquet"')
        if per == "file" and columns is not None:
            raise BuilderError(f'{NAME}: columns applies to per "row" only')
        files = await asyncio.to_thread(self._files, self._patterns(data["files"]))
        if per == "row" and len({reader_of(f) for f in files}) != 1:
            raise BuilderError(f"{NAME}: a bundle is all Parquet or all CSV, not both")
        src = await asyncio.to_thread(self._open, files)
        if per == "file":
            rows = FileRows(src, self.data.bundle_root, files)
            return ScanStream(rows, lambda r: CallSpec(fid, dumps([{"path": r[0], "rows": r[1]}])),
                              fetch_rows=64, max_row_bytes=self.data.scan_max_row_bytes, what=NAME)
        select = ", ".join(quote(c) for c in columns) if columns else "*"
        query = f"SELECT {select} FROM {reader_of(files[0])}({file_list_sql(files)})"
        try:
            scan = await src.open_scan(query, [], owned=True)
        except BaseException as exc:
            src.close()
            if isinstance(exc, DataSourceError):
                raise builder_error(NAME, exc) from None
            raise
        return ScanStream(scan, row_to_call(fid, mode, scan.columns), self.data.scan_fetch_rows,
                          max_row_bytes=self.data.scan_max_row_bytes, what=NAME)

    def _open(self, files: list[str]):
        """The private DuckDB that may open exactly `files` (opened now, in a thread)."""
        src = self.data.files(files)
        try:
            src.cursor().close()
        except DataSourceError as exc:
            raise builder_error(NAME, exc) from None
        return src
