"""Rows to JSON and JSON to column values.

Rows leave the databases as tuples of Python values; calls and `sql` results carry
them as canonical JSON (sorted keys, compact): dates and times as ISO strings
(orjson's own), decimals as numbers, bytes as hex strings.

Writers go the other way: each JSON field is checked against the column's family
before anything is written, so a bad row is reported by its index and field
rather than as a database error halfway through a transaction."""

from __future__ import annotations

import datetime
import decimal
from typing import Any

import orjson

from blockx.json_types import json_type

_SORTED = orjson.OPT_SORT_KEYS


def _default(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() and abs(value) < 2**63 else float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    return str(value)


def dumps(value: Any) -> bytes:
    """Canonical JSON of a value taken from a database row."""
    # decode().encode(): an exactly sized copy (a queued call keeps its args)
    return orjson.dumps(value, option=_SORTED, default=_default).decode().encode()


def row_object_args(columns: tuple[str, ...], row: Any) -> bytes:
    """args = [{column: value, ...}]"""
    return dumps([dict(zip(columns, row))])


def row_column_args(row: Any) -> bytes:
    """args = [value, value, ...]"""
    return dumps(list(row))


# --- column families ---------------------------------------------------------------

INTEGER = "integer"
NUMBER = "number"
BOOLEAN = "boolean"
TEXT = "string"
JSON = "json"
OTHER = "other"

_INT_RANGES = {
    "smallint": 15, "int2": 15, "integer": 31, "int4": 31, "int": 31, "bigint": 63, "int8": 63,
    "tinyint": 7, "hugeint": 127, "utinyint": 8, "usmallint": 16, "uinteger": 32, "ubigint": 64,
}
_FLOATS = {"real", "float4", "double precision", "float8", "double", "float"}
_NUMERIC = ("numeric", "decimal")
_BOOLS = {"boolean", "bool"}
_TEXTS = ("text", "varchar", "character varying", "character", "char", "bpchar", "name", "citext", "string")
_JSONS = {"json", "jsonb"}


def family(type_name: str) -> tuple[str, int]:
    """(family, integer bits) of a database column type name, e.g. 'bigint' -> (INTEGER, 63)."""
    t = type_name.strip().lower()
    base = t.split("(", 1)[0].strip()
    if base in _INT_RANGES:
        return INTEGER, _INT_RANGES[base]
    if base in _FLOATS:
        return NUMBER, 0
    if base.startswith(_NUMERIC):
        return NUMBER, -1
    if base in _BOOLS:
        return BOOLEAN, 0
    if base.startswith(_TEXTS):
        return TEXT, 0
    if base in _JSONS:
        return JSON, 0
    return OTHER, 0


class BadValue(ValueError):
    pass


def coerce(fam: str, bits: int, value: Any) -> Any:
    """The value to send for a JSON field of that family; BadValue with the reason.
    None stays None (the database enforces NOT NULL)."""
    if value is None:
        return None
    if fam == INTEGER:
        if isinstance(value, int) and not isinstance(value, bool):
            if bits and not (-(1 << bits) <= value < (1 << bits)):
                raise BadValue(f"integer {value} does not fit the column")
            return value
        raise BadValue(f"expected an integer, got {json_type(value)} {_short(value)}")
    if fam == NUMBER:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value if bits == -1 else float(value)
        raise BadValue(f"expected a number, got {json_type(value)} {_short(value)}")
    if fam == BOOLEAN:
        if isinstance(value, bool):
            return value
        raise BadValue(f"expected a boolean, got {json_type(value)} {_short(value)}")
    if fam == TEXT:
        if isinstance(value, str):
            return value
        raise BadValue(f"expected a string, got {json_type(value)} {_short(value)}")
    if fam == JSON:
        return orjson.dumps(value).decode()
    # OTHER (dates, uuids, ...): a scalar sent as text and cast by the database
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise BadValue(f"expected a scalar, got {json_type(value)}")


def infer_type(value: Any, postgres: bool) -> str:
    """A column type for createTable, from the first row's value."""
    if isinstance(value, bool):
        return "BOOLEAN"
    if isinstance(value, int):
        return "BIGINT"
    if isinstance(value, float):
        return "DOUBLE PRECISION" if postgres else "DOUBLE"
    if isinstance(value, (dict, list)):
        return "JSONB" if postgres else "JSON"
    return "TEXT"


def _short(value: Any) -> str:
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
