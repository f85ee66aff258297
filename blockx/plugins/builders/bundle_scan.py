"""bundleScan: a streaming builder over a bundle, a set of Parquet or CSV files.

    {"files": "data/2026-11-*.parquet", "functionId": "f", "per": "row",
     "columns": ["id", "x"], "args": "row"}

`files` is a glob (or a list of globs) relative to the Worker's bundle root
(dataPlane.bundleRoot); a path that leaves the root is refused. Files are read
through DuckDB in name order, rows in file order.
  per "row" (default): one call per row, as dbscan ("row": one object argument,
                       "columns": positional); `columns` selects and orders them.
  per "file":          one call per file, f({"path": "data/x.parquet", "rows": n}),
                       for functions that process a whole file.
No file matching, a missing column or an unreadable file fails the Builder phase."""

from __future__ import annotations

import glob
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
MAX_FILES = 100_000
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
        out = []
        while self._pos < len(self._files) and len(out) < n:
            path = self._files[self._pos]
            self._pos += 1
            cols, rows = await self._src.fetch_rows(
                f"SELECT count(*) FROM {reader_of(path)}({sql_str(path)})", [], 1)
            out.append((os.path.relpath(path, self._root), int(rows[0][0])))
        return out

    async def aclose(self) -> None:
        self._pos = len(self._files)


class BundleScanBuilder:
    name = NAME
    NEEDS_DATA = True

    def __init__(self, data: Any):
        self.data = data

    def build(self, payload: bytes, ctx: Any = None) -> list[CallSpec]:  # pragma: no cover - never called
        raise BuilderError(f"{NAME} is an async streaming builder (open_stream)")

    def _files(self, spec: Any) -> list[str]:
        patterns = [spec] if isinstance(spec, str) else spec
        if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
            raise BuilderError(f"{NAME}: files must be a glob or a non-empty array of globs, "
                               f"got {json_type(spec)}")
        found: list[str] = []
        for pat in patterns:
            try:
                full = self.data.bundle_path(pat, "files")
            except DataSourceError as exc:
                raise BuilderError(f"{NAME}: {exc.message}") from None
            matches = sorted(m for m in glob.glob(full) if os.path.isfile(m))
            if not matches:
                raise BuilderError(f"{NAME}: no file matches {pat!r} under the bundle root")
            for m in matches:
                if not reader_of(m):
                    raise BuilderError(f"{NAME}: {os.path.relpath(m, self.data.bundle_root)!r} is neither "
                                       "Parquet nor CSV (.parquet, .csv, .tsv, optionally .gz)")
                if m not in found:
                    found.append(m)
        if len(found) > MAX_FILES:
            raise BuilderError(f"{NAME}: {len(found)} files is more than {MAX_FILES}")
        return found

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
        files = self._files(data["files"])
        src = self.data.files
        if per == "file":
            if columns is not None:
                raise BuilderError(f'{NAME}: columns applies to per "row" only')
            rows = FileRows(src, self.data.bundle_root, files)
            return ScanStream(rows, lambda r: CallSpec(fid, dumps([{"path": r[0], "rows": r[1]}])),
                              fetch_rows=64)
        readers = {reader_of(f) for f in files}
        if len(readers) != 1:
            raise BuilderError(f"{NAME}: a bundle is all Parquet or all CSV, not both")
        select = ", ".join(quote(c) for c in columns) if columns else "*"
        query = f"SELECT {select} FROM {readers.pop()}({file_list_sql(files)})"
        try:
            scan = await src.open_scan(query, [])
        except DataSourceError as exc:
            raise builder_error(NAME, exc) from None
        return ScanStream(scan, row_to_call(fid, mode, scan.columns), self.data.scan_fetch_rows)
