"""The rows a table writer takes from a task's outputs, checked before any write.

Each output is a JSON object (one row) or an array of objects (several rows);
fields are columns. A row is refused, naming its index, its output and the field,
when the field name is not a plain SQL identifier (the rule of idents, the same as
for configured names: a field name is data and never reaches SQL unchecked), the
field is not a column of the table, a key field is missing or null, or a value
does not fit the column's family. Rows with the same key are merged in
order, later fields over earlier ones: the table ends exactly as if the rows had
been upserted one by one, and the batched statement never touches a key twice.
Rows are grouped by their set of fields, column-major, ready for the bulk load of
each group.

Memory: outputs are decoded one at a time straight into the column lists, so a
million-row task holds its values once (plus one index entry per key), not a
dict per row."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import orjson

from blockx.json_types import json_type
from blockx.plugins.data.idents import RULE, is_ident, shown
from blockx.plugins.data.values import BadValue, coerce, family, infer_type


class BadRows(ValueError):
    pass


def check_field(where: str, name: str) -> None:
    """BadRows naming the row and the field when a field name is not a plain SQL
    identifier (the writers use field names as column names)."""
    if not is_ident(name):
        raise BadRows(f"{where}: field {shown(name)} is not a plain SQL identifier ({RULE}); "
                      "rename it in the function's output")


def iter_rows(outputs: Sequence[bytes], first: int = 0) -> Iterator[tuple[int, dict]]:
    """(output index, row) of every row, in order; BadRows for a bad output.
    ``first``: the index of outputs[0] in the task (a streamed batch)."""
    for i, raw in enumerate(outputs, first):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadRows(f"output {i} is not valid JSON ({exc})") from None
        if isinstance(value, dict):
            yield i, value
        elif isinstance(value, list):
            for j, item in enumerate(value):
                if not isinstance(item, dict):
                    raise BadRows(f"output {i} item {j} is {json_type(item)}, expected a JSON object "
                                  "whose fields are columns")
                yield i, item
        else:
            raise BadRows(f"output {i} is {json_type(value)}, expected a JSON object whose fields are "
                          "columns (or an array of such objects)")


def parse_rows(outputs: Sequence[bytes]) -> list[tuple[int, dict]]:
    return list(iter_rows(outputs))


def first_rows(outputs: Sequence[bytes], n: int = 100) -> list[tuple[int, dict]]:
    """The first rows, for createTable (the whole outputs are checked later)."""
    return list(itertools.islice(iter_rows(outputs), n))


def create_columns(rows: list[tuple[int, dict]], key: Sequence[str], postgres: bool) -> list[tuple[str, str]]:
    """Columns for createTable: the fields of the first row, typed from its values
    (a later row's value decides a type the first row left null)."""
    first = rows[0][1]
    out = []
    seen: dict[str, str] = {}
    for name, value in first.items():
        check_field(f"row 0 (output {rows[0][0]})", name)
        other = seen.setdefault(name.lower(), name)
        if other != name:
            raise BadRows(f"row 0 (output {rows[0][0]}): fields {shown(other)} and {shown(name)} differ only in "
                          "case (DuckDB column names ignore case)")
        if value is None:
            value = next((r[name] for _i, r in rows if r.get(name) is not None), None)
        out.append((name, infer_type(value, postgres)))
    missing = [k for k in key if k not in first]
    if missing:
        raise BadRows(f"row 0 (output {rows[0][0]}): key field {missing[0]!r} is missing")
    return out


_GROUP_BITS = 16


class _Group:
    __slots__ = ("names", "cols", "dead")

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        self.cols: list[list[Any]] = [[] for _ in names]
        self.dead: set[int] = set()

    def values(self) -> list[list[Any]]:
        if not self.dead:
            return self.cols
        dead = self.dead
        return [[v for i, v in enumerate(col) if i not in dead] for col in self.cols]


def prepare(rows: Iterable[tuple[int, dict]], columns: dict[str, str], key: Sequence[str],
            table: str, first_row: int = 0) -> list[tuple[tuple[str, ...], list[list[Any]]]]:
    """Check, coerce, merge by key and group; BadRows names the first bad row
    (``first_row``: the task's number of the first row, for a streamed batch)."""
    # A column whose name breaks the identifier rule (made outside the Worker) is
    # never written: a field naming it fails as any other bad field name.
    fams = {c: family(t) for c, t in columns.items() if is_ident(c)}
    groups: dict[tuple[str, ...], int] = {}
    glist: list[_Group] = []
    # key value (or tuple) -> row index << 16 | group number: one small int per key
    seen: dict[Any, int] = {}
    single = key[0] if len(key) == 1 else None
    mask = (1 << _GROUP_BITS) - 1
    for n, (out_i, row) in enumerate(rows, first_row):
        where = f"row {n} (output {out_i})"
        clean: dict[str, Any] = {}
        for field, value in row.items():
            fam = fams.get(field)
            if fam is None:
                check_field(where, field)
                known = ", ".join(columns)
                raise BadRows(f"{where}: unknown column {shown(field)} (table {table} has: {known})")
            try:
                clean[field] = coerce(fam[0], fam[1], value)
            except BadValue as exc:
                raise BadRows(f"{where}, field {field!r}: {exc}") from None
        for f in key:
            if clean.get(f) is None:
                raise BadRows(f"{where}: key field {f!r} is {'null' if f in clean else 'missing'}")
        kv = clean[single] if single is not None else tuple(clean[f] for f in key)
        prev = seen.get(kv)
        if prev is not None:
            g = glist[prev & mask]
            idx = prev >> _GROUP_BITS
            g.dead.add(idx)
            merged = {c: g.cols[j][idx] for j, c in enumerate(g.names)}
            merged.update(clean)
            clean = merged
        names = tuple(clean)
        gno = groups.get(names)
        if gno is None:
            gno = groups[names] = len(glist)
            if gno > mask:
                raise BadRows(f"{where}: more than {mask + 1} different sets of fields")
            glist.append(_Group(names))
        g = glist[gno]
        seen[kv] = (len(g.cols[0]) << _GROUP_BITS) | gno
        for col, v in zip(g.cols, clean.values()):
            col.append(v)
    out = []
    for g in glist:
        values = g.values()
        if values and values[0]:
            out.append((g.names, values))
    return out
