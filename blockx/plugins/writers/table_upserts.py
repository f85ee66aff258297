"""tableUpserts: a task's outputs upserted into a table of a named data source.

    {"target": "main", "table": "results", "key": ["id"], "createTable": false}

Each output is a JSON object (or an array of objects) whose fields are columns.
All rows of the task are written in ONE transaction with INSERT ... ON CONFLICT
(key) DO UPDATE: a retried or resubmitted task writes the same rows again and
leaves one row per key. Nothing is written if any row is bad (unknown column,
missing key, wrong type): the task fails PLUGIN_FAILED naming the row and the
field. createTable creates a missing table from the first row (key = primary
key). Details: {"rows": n, "target": ..., "table": ...}."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from blockx.plugins.data.errors import DataSourceError
from blockx.plugins.data.idents import check_ident, split_table
from blockx.plugins.writer_api import PluginResult, parse_config
from blockx.plugins.writers.table_rows import BadRows, create_columns, first_rows, iter_rows, prepare

NAME = "tableUpserts"
_KEYS = ("target", "table", "key", "createTable")


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


def _details(rows: int, target: str, table: str) -> bytes:
    return orjson.dumps({"rows": rows, "target": target, "table": table})
