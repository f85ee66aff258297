"""tableUpserts: a task's outputs upserted into a table of a named data source.

    {"target": "main", "table": "results", "key": ["id"], "createTable": false}

Each output is a JSON object (or an array of objects) whose fields are columns.
All rows of the task become visible at once, written in ONE transaction with
INSERT ... ON CONFLICT (key) DO UPDATE (a DuckDB table the task creates is built
aside under a staging name and renamed at the commit: duck_upsert): a retried or
resubmitted task writes the same rows again and leaves one row per key. Nothing is written if any row is bad (unknown column,
missing key, wrong type): the task fails PLUGIN_FAILED naming the row and the
field. createTable creates a missing table from the first row (key = primary
key). Details: {"rows": n, "target": ..., "table": ...}.

Streamed (a streaming builder; plugin_api): the same transaction takes each
settled batch as it comes (checked, merged by key within the batch, upserted;
a key met again in a later batch is upserted again over it, which ends the
same as merging) and commits when the task succeeds; createTable types the
table from the first batch's first rows. A bad row in any batch fails the task
and rolls everything back."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from blockx.plugins.data.errors import DataSourceError
from blockx.plugins.data.idents import check_ident, split_table
from blockx.plugins.plugin_api import STREAM_KEYS, PluginError, PluginResult, parse_config, stream_options
from blockx.plugins.writers.table_rows import BadRows, create_columns, first_rows, iter_rows, prepare

NAME = "tableUpserts"
_KEYS = ("target", "table", "key", "createTable") + STREAM_KEYS


def _config(cfg: dict) -> tuple[str, str | None, str, list[str], bool]:
    extra = sorted(k for k in cfg if k not in _KEYS)
    if extra:
        raise ValueError(f"unknown config key(s) {', '.join(map(repr, extra))} (allowed: {', '.join(_KEYS)})")
    target = cfg.get("target")
    if not isinstance(target, str) or not target:
        raise ValueError("target must name a data source")
    schema, table = split_table(cfg.get("table"))
    key = cfg.get("key")
    if isinstance(key, str):
        key = [key]
    if not isinstance(key, list) or not key:
        raise ValueError('key must be a column name or a non-empty array of them, e.g. ["id"]')
    for k in key:
        check_ident("key column", k)
    if len(set(key)) != len(key):
        raise ValueError("key lists a column twice")
    create = cfg.get("createTable", False)
    if not isinstance(create, bool):
        raise ValueError("createTable must be true or false")
    try:
        stream_options(NAME, cfg)
    except PluginError as exc:
        raise ValueError(str(exc).removeprefix(f"{NAME}: ")) from None
    return target, schema, table, key, create


class TableUpsertsPlugin:
    name = NAME
    NEEDS_DATA = True

    def __init__(self, data: Any):
        self.data = data

    async def execute(self, config: bytes, outputs: list[bytes], ctx: Any = None) -> PluginResult:
        try:
            target, schema, table, key, create = _config(parse_config(NAME, config))
            source = self.data.source(target, "target")
        except (ValueError, DataSourceError) as exc:
            return PluginResult(NAME, False, f"{NAME}: {exc}")
        tname = f"{schema}.{table}" if schema else table
        try:
            sample = first_rows(outputs)
            if not sample:
                return PluginResult(NAME, True, "0 rows written", _details(0, target, tname))
            columns = await source.table_columns(schema, table)
            made = None
            if columns is None:
                if not create:
                    return PluginResult(NAME, False, f"{NAME}: table {tname!r} does not exist in source "
                                                     f"{target!r} (set createTable to create it)")
                made = create_columns(sample, key, source.kind == "postgresql")
                columns = dict(made)
            missing = [k for k in key if k not in columns]
            if missing:
                return PluginResult(NAME, False, f"{NAME}: key column {missing[0]!r} is not a column of {tname}")
            # Decoding and checking a million rows is CPU work: off the event loop.
            groups = await asyncio.to_thread(prepare, iter_rows(outputs), columns, key, tname)
            if not groups:
                return PluginResult(NAME, True, "0 rows written", _details(0, target, tname))
            written = await source.upsert(schema, table, key, groups, create=made, types=columns)
        except BadRows as exc:
            return PluginResult(NAME, False, f"{NAME}: nothing written: {exc}")
        except DataSourceError as exc:
            return PluginResult(NAME, False, f"{NAME}: nothing written: {exc.message}", retryable=exc.retryable)
        return PluginResult(NAME, True, f"{written} rows written to {tname}", _details(written, target, tname))


    def open_stream(self, config: bytes, ctx: Any = None) -> _UpsertStream:
        try:
            target, schema, table, key, create = _config(parse_config(NAME, config))
            source = self.data.source(target, "target")
        except (ValueError, DataSourceError) as exc:
            raise PluginError(f"{NAME}: {exc}") from None
        return _UpsertStream(source, target, schema, table, key, create)


class _UpsertStream:
    """One task's streamed upsert: one transaction over every batch."""

    def __init__(self, source: Any, target: str, schema: str | None, table: str, key: list[str],
                 create: bool) -> None:
        self._source = source
        self._target = target
        self._schema = schema
        self._table = table
        self._tname = f"{schema}.{table}" if schema else table
        self._key = key
        self._create = create
        self._columns: dict[str, str] | None = None
        self._tx: Any = None
        self._outputs = 0          # outputs seen (the index of the next batch's first)
        self._rows = 0             # rows seen (the number of the next batch's first)
        self._written = 0

    async def _open(self, outputs: list[bytes]) -> bool:
        sample = first_rows(outputs)
        if not sample:
            return False
        columns = await self._source.table_columns(self._schema, self._table)
        made = None
        if columns is None:
            if not self._create:
                raise PluginError(f"{NAME}: table {self._tname!r} does not exist in source "
                                  f"{self._target!r} (set createTable to create it)")
            made = create_columns(sample, self._key, self._source.kind == "postgresql")
            columns = dict(made)
        missing = [k for k in self._key if k not in columns]
        if missing:
            raise PluginError(f"{NAME}: key column {missing[0]!r} is not a column of {self._tname}")
        self._columns = columns
        self._tx = self._source.open_upsert(self._schema, self._table, self._key, create=made, types=columns)
        return True

    async def write(self, outputs: list[bytes]) -> None:
        try:
            if self._tx is None and not await self._open(outputs):
                self._outputs += len(outputs)
                return
            rows = _Counted(iter_rows(outputs, self._outputs))
            assert self._columns is not None, "_open read the table's columns"
            groups = await asyncio.to_thread(prepare, rows, self._columns, self._key, self._tname, self._rows)
            self._outputs += len(outputs)
            self._rows += rows.n
            if groups:
                self._written += await self._tx.write(groups)
        except BadRows as exc:
            raise PluginError(f"{NAME}: nothing written: {exc}") from None
        except DataSourceError as exc:
            err = PluginError(f"{NAME}: nothing written: {exc.message}")
            err.retryable = exc.retryable
            raise err from None

    async def commit(self) -> PluginResult:
        try:
            if self._tx is not None:
                await self._tx.commit()
        except DataSourceError as exc:
            return PluginResult(NAME, False, f"{NAME}: nothing written: {exc.message}", retryable=exc.retryable)
        n = self._written
        return PluginResult(NAME, True, f"{n} rows written to {self._tname}", _details(n, self._target, self._tname))

    async def abort(self) -> None:
        if self._tx is not None:
            await self._tx.rollback()


class _Counted:
    """An iterator of rows that counts them (the row numbers of the next batch)."""

    __slots__ = ("_it", "n")

    def __init__(self, it) -> None:
        self._it = it
        self.n = 0

    def __iter__(self):
        return self

    def __next__(self):
        row = next(self._it)
        self.n += 1
        return row


def _details(rows: int, target: str, table: str) -> bytes:
    return orjson.dumps({"rows": rows, "target": target, "table": table})
