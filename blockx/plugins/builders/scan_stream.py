"""ScanStream: the calls of an open database scan, a batch at a time.

Shared by dbscan and bundleScan. Rows are fetched `fetch_rows` at a time (one
round trip each) and turned into calls until a batch reaches the dispatcher's row
or byte bound; the next fetch happens only when the producer asks for the next
batch, i.e. when the credit window allows. So the Worker holds at most the window's
batches, whatever the row count: memory stays flat in the size of the table.

A row whose call arguments exceed `max_row_bytes` (dataPlane.scanMaxRowBytes)
ends the stream with a BuilderError naming the row, its size and the setting:
one huge value never becomes a call that no executor frame can carry."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from blockx.plugins.builder_api import BuilderError, CallSpec

DEFAULT_MAX_ROW_BYTES = 4 * 1024 * 1024


class ScanStream:
    __slots__ = ("_scan", "_to_call", "_fetch_rows", "_closed", "rows", "_max_row_bytes", "_what")

    def __init__(self, scan: Any, to_call: Callable[[Any], CallSpec], fetch_rows: int = 1000, *,
                 max_row_bytes: int = DEFAULT_MAX_ROW_BYTES, what: str = "scan"):
        self._scan = scan
        self._to_call = to_call
        self._fetch_rows = max(1, fetch_rows)
        self._closed = False
        self._max_row_bytes = max_row_bytes
        self._what = what
        self.rows = 0               # rows fetched so far

    @property
    def total(self) -> int | None:
        return None

    @property
    def closed(self) -> bool:
        return self._closed

    async def abatches(self, max_rows: int, max_args_bytes: int) -> AsyncIterator[list[CallSpec]]:
        if max_rows <= 0 or max_args_bytes <= 0:
            raise ValueError("max_rows and max_args_bytes must be > 0")
        to_call = self._to_call
        batch: list[CallSpec] = []
        size = 0
        while not self._closed:
            rows = await self._scan.fetch(min(self._fetch_rows, max_rows - len(batch)) if batch else
                                          min(self._fetch_rows, max_rows))
            if not rows:
                break
            first = self.rows
            self.rows += len(rows)
            cap = self._max_row_bytes
            for i, row in enumerate(rows):
                spec = to_call(row)
                n = len(spec.args_json)
                if n > cap:
                    raise BuilderError(f"{self._what}: row {first + i} is {n} bytes as call arguments, more than "
                                       f"dataPlane.scanMaxRowBytes ({cap}, SCAN_MAX_ROW_BYTES); select fewer "
                                       "or smaller columns, or raise the setting")
                if batch and (len(batch) >= max_rows or size + n > max_args_bytes):
                    yield batch
                    batch, size = [], 0
                batch.append(spec)
                size += n
            if len(batch) >= max_rows:
                yield batch
                batch, size = [], 0
        if batch and not self._closed:
            yield batch
        await self.aclose()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._scan.aclose()

    def close(self) -> None:
        if not self._closed:
            try:
                asyncio.get_running_loop().create_task(self.aclose())
            except RuntimeError:       # no loop: nothing async left to release
                self._closed = True
