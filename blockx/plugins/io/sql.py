"""sql: read-only queries against the Worker's named data sources, for user code.

    sdk.io("sql", {"source": "main", "query": "SELECT ... WHERE id = $1", "params": [7]})
      -> {"columns": ["id", "x"], "rows": [{"id": 7, "x": 1}], "rowCount": 1}

The request names a source, never a DSN. The query runs read-only (as dbscan's),
under per-source admission (at most `concurrency` requests in flight against one
source across all tasks) and a per-request timeout (`timeout_ms`, from entering
admission to the last row). A result
larger than `max_rows` is refused with a message saying so, rather than carried
into the executor: page the query, or scan it with dbscan."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from blockx.json_types import json_type
from blockx.plugins.data.errors import DataSourceError
from blockx.plugins.data.values import dumps
from blockx.plugins.io.errors import IOBackendError

NAME = "sql"
_KEYS = ("source", "query", "params")


class SqlBackend:
    name = NAME

    def __init__(self, data: Any, *, concurrency: int = 8, max_rows: int = 10_000, timeout_ms: int = 5_000):
        if concurrency <= 0 or max_rows <= 0 or timeout_ms <= 0:
            raise ValueError("concurrency, max_rows and timeout_ms must be > 0")
        self.timeout_ms = timeout_ms
        self.data = data
        self.concurrency = concurrency
        self.max_rows = max_rows
        self._admission: dict[str, asyncio.Semaphore] = {}

    def _parse(self, request_json: bytes) -> tuple[str, str, list]:
        try:
            req = orjson.loads(request_json)
        except orjson.JSONDecodeError as exc:
            raise IOBackendError(f"sql: request is not valid JSON ({exc})") from None
        if not isinstance(req, dict):
            raise IOBackendError(f"sql: request must be a JSON object, got {json_type(req)}")
        extra = sorted(k for k in req if k not in _KEYS)
        if extra:
            raise IOBackendError(f"sql: unknown request key(s) {', '.join(map(repr, extra))} "
                                 f"(allowed: {', '.join(_KEYS)})")
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
        try:
            async with sem:
                columns, rows = await asyncio.wait_for(source.fetch_rows(query, params, self.max_rows),
                                                       self.timeout_ms / 1000)
        except asyncio.TimeoutError:
            raise IOBackendError(f"sql: the query took longer than {self.timeout_ms} ms (ioBackends.sql.timeoutMs)",
                                 retryable=True) from None
        except DataSourceError as exc:
            raise IOBackendError(f"sql: {exc.message}", retryable=exc.retryable) from None
        if len(rows) > self.max_rows:
            raise IOBackendError(f"sql: the result has more than {self.max_rows} rows (ioBackends.sql.maxRows); "
                                 "add a LIMIT, page the query, or scan it with the dbscan builder")
        return dumps({"columns": list(columns), "rows": [dict(zip(columns, r)) for r in rows],
                      "rowCount": len(rows)}), None

    async def close(self) -> None:
        return None       # the sources belong to the DataPlane, closed with the Worker
