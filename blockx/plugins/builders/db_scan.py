"""dbscan: a streaming builder, one call per row of a read-only query.

    {"source": "main", "query": "SELECT id, x FROM t WHERE x > $1", "params": [10],
     "functionId": "f", "args": "row"}

`source` names a data source of the Worker's config (never a DSN). Calls come in
query order. `args: "row"` (the default) passes the row as one JSON object
argument ({"id": 1, "x": 11}); `"columns"` passes the columns as positional
arguments (f(1, 11)). The query must be a plain, side-effect-free query
(PostgreSQL: one SELECT, VALUES or TABLE in a READ ONLY transaction, through a
server-side cursor; DuckDB: exactly one SELECT calling no function that changes
the database or shows its configuration; pg_sql and duck_sql say what is
refused), each step bounded by phaseIoTimeoutMs (the task's deadline cancels
the scan, and so stops its query, sooner). It is opened in the Builder phase, so a bad or refused
query, an unknown source or a write fails the task with BUILDER_FAILED and the
database's message (a statement timeout or a lost connection: retryable). A row larger than
dataPlane.scanMaxRowBytes as call arguments fails the task BUILDER_FAILED too."""

from __future__ import annotations

from typing import Any

from blockx.json_types import json_type
from blockx.plugins.builder_api import (BuilderError, CallSpec, parse_payload, reject_unknown,
                                        require_function_id, require_object)
from blockx.plugins.builders.scan_stream import ScanStream
from blockx.plugins.data.errors import DataSourceError
from blockx.plugins.data.values import row_column_args, row_object_args

NAME = "dbscan"
ARGS_MODES = ("row", "columns")
MAX_QUERY_CHARS = 100_000


def row_to_call(function_id: str, mode: str, columns: tuple[str, ...]):
    if mode == "row":
        return lambda row: CallSpec(function_id, row_object_args(columns, row))
    return lambda row: CallSpec(function_id, row_column_args(row))


def builder_error(name: str, exc: DataSourceError) -> BuilderError:
    """A data-plane failure as a BUILDER_FAILED message; an unreachable database
    stays retryable (the same payload may succeed later)."""
    err = BuilderError(f"{name}: {exc.message}")
    err.retryable = exc.retryable
    return err


def check_args_mode(name: str, data: dict) -> str:
    mode = data.get("args", "row")
    if mode not in ARGS_MODES:
        raise BuilderError(f'{name}: args must be "row" or "columns", got {json_type(mode)} {mode!r}')
    return mode


class DbScanBuilder:
    name = NAME
    NEEDS_DATA = True

    def __init__(self, data: Any):
        self.data = data

    def build(self, payload: bytes, ctx: Any = None) -> list[CallSpec]:  # pragma: no cover - never called
        raise BuilderError(f"{NAME} is an async streaming builder (open_stream)")

    async def open_stream(self, payload: bytes, ctx: Any = None) -> ScanStream:
        data = require_object(NAME, parse_payload(NAME, payload))
        reject_unknown(NAME, data, ("source", "query", "params", "functionId", "args"))
        fid = require_function_id(NAME, data.get("functionId"))
        mode = check_args_mode(NAME, data)
        query = data.get("query")
        if not isinstance(query, str) or not query.strip():
            raise BuilderError(f"{NAME}: query must be a non-empty string")
        if len(query) > MAX_QUERY_CHARS:
            raise BuilderError(f"{NAME}: query is longer than {MAX_QUERY_CHARS} characters")
        params = data.get("params", [])
        if not isinstance(params, list) or any(isinstance(p, (dict, list)) for p in params):
            raise BuilderError(f"{NAME}: params must be an array of scalars (numbers, strings, booleans, null)")
        try:
            source = self.data.source(data.get("source"))
            # Bounded by phaseIoTimeoutMs; the task's deadline is the core's (on
            # its clock), which ends the phase and so cancels the scan.
            scan = await source.open_scan(query, params)
        except DataSourceError as exc:
            raise builder_error(NAME, exc) from None
        return ScanStream(scan, row_to_call(fid, mode, scan.columns), self.data.scan_fetch_rows,
                          max_row_bytes=self.data.scan_max_row_bytes, what=NAME)
