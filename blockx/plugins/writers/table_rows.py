"""The rows a table writer takes from a task's outputs, checked before any write.

Each output is a JSON object (one row) or an array of objects (several rows);
fields are columns. A row is refused, naming its index, its output and the field,
when the field is not a column of the table, a key field is missing or null, or a
value does not fit the column's family. Rows with the same key are merged in
order, later fields over earlier ones: the table ends exactly as if the rows had
been upserted one by one, and the batched statement never touches a key twice.
Rows are then grouped by their set of fields, column-major, ready for the bulk
load of each group."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from blockx.json_types import json_type
from blockx.plugins.data.values import BadValue, coerce, family, infer_type


class BadRows(ValueError):
    pass


def parse_rows(outputs: Sequence[bytes]) -> list[tuple[int, dict]]:
    """(output index, row) of every row, in order."""
    rows: list[tuple[int, dict]] = []
    for i, raw in enumerate(outputs):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadRows(f"output {i} is not valid JSON ({exc})") from None
        if isinstance(value, dict):
            rows.append((i, value))
        elif isinstance(value, list):
            for j, item in enumerate(value):
                if not isinstance(item, dict):
                    raise BadRows(f"output {i} item {j} is {json_type(item)}, expected a JSON object "
                                  "whose fields are columns")
                rows.append((i, item))
        else:
            raise BadRows(f"output {i} is {json_type(value)}, expected a JSON object whose fields are "
                          "columns (or an array of such objects)")
    return rows


def create_columns(rows: list[tuple[int, dict]], key: Sequence[str], postgres: bool) -> list[tuple[str, str]]:
    """Columns for createTable: the fields of the first row, typed from its values
    (a later row's value decides a type the first row left null)."""
    first = rows[0][1]
    out = []
    for name, value in first.items():
        if value is None:
            value = next((r[name] for _i, r in rows if r.get(name) is not None), None)
        out.append((name, infer_type(value, postgres)))
    missing = [k for k in key if k not in first]
    if missing:
        raise BadRows(f"row 0 (output {rows[0][0]}): key field {missing[0]!r} is missing")
    return out


def prepare(rows: list[tuple[int, dict]], columns: dict[str, str], key: Sequence[str],
            table: str) -> list[tuple[tuple[str, ...], list[list[Any]]]]:
    """Check, coerce, merge by key and group; BadRows names the first bad row."""
    fams = {c: family(t) for c, t in columns.items()}
    merged: dict[tuple, dict] = {}
    for n, (out_i, row) in enumerate(rows):
        where = f"row {n} (output {out_i})"
        clean: dict[str, Any] = {}
        for field, value in row.items():
            fam = fams.get(field)
            if fam is None:
                known = ", ".join(columns)
                raise BadRows(f"{where}: unknown column {field!r} (table {table} has: {known})")
            try:
                clean[field] = coerce(fam[0], fam[1], value)
            except BadValue as exc:
                raise BadRows(f"{where}, field {field!r}: {exc}") from None
        k = []
        for f in key:
            v = clean.get(f)
            if v is None:
                raise BadRows(f"{where}: key field {f!r} is {'null' if f in clean else 'missing'}")
            k.append(v)
        kt = tuple(k)
        prev = merged.get(kt)
        if prev is None:
            merged[kt] = clean
        else:
            prev.update(clean)
    groups: dict[tuple[str, ...], list[list[Any]]] = {}
    for row in merged.values():
        cols = tuple(row)
        g = groups.get(cols)
        if g is None:
            g = groups[cols] = [[] for _ in cols]
        for lst, v in zip(g, row.values()):
            lst.append(v)
    return list(groups.items())
