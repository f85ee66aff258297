"""sql: read-only queries against the Worker's named data sources, for user code.

    sdk.io("sql", {"source": "main", "query": "SELECT ... WHERE id = $1", "params": [7]})
      -> {"columns": ["id", "x"], "rows": [{"id": 7, "x": 1}], "rowCount": 1}

The request names a source, never a DSN. The query runs read-only (as dbscan's),
under per-source admission (at most `concurrency` requests in flight against one
source across all tasks) and a per-request timeout (`timeout_ms`, from entering
admission to the last row), which the database enforces too: the query's
statement timeout is phaseIoTimeoutMs or what is left of `timeout_ms` once
admitted, whichever is smaller. The query must be a plain, side-effect-free one
(pg_sql, duck_sql say what is refused). A result
larger than `max_rows` rows, or than `max_result_bytes` as JSON, is refused with a
message naming the cap and its setting, rather than carried into the executor:
page the query, or scan it with dbscan. Rows are fetched and encoded a chunk at a
time, so a refused result never sits whole in the Worker's memory."""

from __future__ import annotations

import asyncio
from typing import Any

from blockx.core.config_rules import Rule
from blockx.plugins.data.errors import DataSourceError
from blockx.plugins.data.values import dumps
from blockx.plugins.io.request import request_object
from blockx.plugins.io.errors import IOBackendError

NAME = "sql"
_KEYS = ("source", "query", "params")
FETCH_CHUNK = 500
# The rules of the ioBackends.sql settings.
SQL_RULES = (Rule("concurrency", 1), Rule("timeout_ms", 1), Rule("max_rows", 1),
             Rule("max_result_bytes", 1, 15 * 1024 * 1024, note="a result travels in one 16 MiB frame"))


class SqlBackend:
    name = NAME

    def __init__(self, data: Any, *, concurrency: int = 8, max_rows: int = 10_000, timeout_ms: int = 5_000,
                 max_result_bytes: int = 8 * 1024 * 1024):
        if concurrency <= 0 or max_rows <= 0 or timeout_ms <= 0 or max_result_bytes <= 0:
            raise ValueError("concurrency, max_rows, timeout_ms and max_result_bytes must be > 0")
        self.timeout_ms = timeout_ms
        self.data = data
        self.concurrency = concurrency
        self.max_rows = max_rows
        self.max_result_bytes = max_result_bytes
        self._admission: dict[str, asyncio.Semaphore] = {}

    def _parse(self, request_json: bytes) -> tuple[Any, str, list]:
        req = request_object("sql", request_json, _KEYS)
        query = req.get("query")
        if not isinstance(query, str) or not query.strip():
            raise IOBackendError("sql: query must be a non-empty string")
        params = req.get("params", [])
        if not isinstance(params, list) or any(isinstance(p, (dict, list)) for p in params):
            raise IOBackendError("sql: params must be an array of scalars")
        return req.get("source"), query, params

    async def request(self, request_json: bytes, body: bytes | None) -> tuple[bytes, bytes | None]:
        name, query, params = self._parse(request_json)
        try:
            source = self.data.source(name)
        except DataSourceError as exc:
            raise IOBackendError(f"sql: {exc.message}") from None
        sem = self._admission.get(name)
        if sem is None:
            sem = self._admission[name] = asyncio.Semaphore(self.concurrency)
        loop = asyncio.get_running_loop()
        end = loop.time() + self.timeout_ms / 1000
        try:
            async with sem:
                columns, encoded = await asyncio.wait_for(self._collect(source, query, params, end),
                                                          self.timeout_ms / 1000)
        except asyncio.TimeoutError:
            raise IOBackendError(f"sql: the query took longer than {self.timeout_ms} ms (ioBackends.sql.timeoutMs)",
                                 retryable=True) from None
        except DataSourceError as exc:
            if exc.retryable and loop.time() >= end - 0.05:
                # The database's own bound (its statement timeout, DuckDB's
                # interrupt) fired at the end of this request's: the same timeout.
                raise IOBackendError(f"sql: the query took longer than {self.timeout_ms} ms "
                                     "(ioBackends.sql.timeoutMs)", retryable=True) from None
            raise IOBackendError(f"sql: {exc.message}", retryable=exc.retryable) from None
        # The keys in sorted order, as dumps() writes them: columns, rowCount, rows.
        return b"".join((b'{"columns":', dumps(list(columns)), b',"rowCount":', str(len(encoded)).encode(),
                         b',"rows":[', b",".join(encoded), b"]}")), None

    async def _collect(self, source: Any, query: str, params: list, end: float) -> tuple[tuple[str, ...], list[bytes]]:
        """The columns and each row's canonical JSON object, within both caps;
        `end`: the loop time the request's timeout ends at."""
        left_ms = max(1, int((end - asyncio.get_running_loop().time()) * 1000))
        scan = await source.open_scan(query, params, timeout_ms=left_ms)
        try:
            columns = scan.columns
            encoded: list[bytes] = []
            size = 0
            while True:
                rows = await scan.fetch(min(FETCH_CHUNK, self.max_rows + 1 - len(encoded)))
                if not rows:
                    return columns, encoded
                for r in rows:
                    row = dumps(dict(zip(columns, r)))
                    size += len(row) + 1
                    if size > self.max_result_bytes:
                        raise IOBackendError(
                            f"sql: the result is larger than {self.max_result_bytes} bytes as JSON "
                            f"(ioBackends.sql.maxResultBytes, SQL_IO_MAX_RESULT_BYTES) after {len(encoded)} "
                            "rows; select fewer columns, add a LIMIT, page the query, or scan it with the "
                            "dbscan builder")
                    encoded.append(row)
                if len(encoded) > self.max_rows:
                    raise IOBackendError(
                        f"sql: the result has more than {self.max_rows} rows (ioBackends.sql.maxRows); "
                        "add a LIMIT, page the query, or scan it with the dbscan builder")
        finally:
            await scan.aclose()

    async def close(self) -> None:
        return None       # the sources belong to the DataPlane, closed with the Worker
