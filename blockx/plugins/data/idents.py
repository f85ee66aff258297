"""SQL identifiers from configs (table, key and column names): checked against a
strict pattern and always double-quoted, so a writer config can never inject SQL."""

from __future__ import annotations

import re

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def check_ident(what: str, name: object) -> str:
    if not isinstance(name, str) or not _IDENT.match(name):
        raise ValueError(f"{what} {name!r} is not a plain SQL identifier "
                         "(letters, digits and '_', not starting with a digit)")
    return name


def quote(name: str) -> str:
    return '"' + name + '"'


def split_table(name: object) -> tuple[str | None, str]:
    """'results' -> (None, 'results'); 'app.results' -> ('app', 'results')."""
    if not isinstance(name, str):
        raise ValueError(f"table must be a string, got {type(name).__name__}")
    parts = name.split(".")
    if len(parts) > 2:
        raise ValueError(f"table {name!r}: at most schema.table")
    for p in parts:
        check_ident("table", p)
    return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])


def quoted_table(schema: str | None, table: str) -> str:
    return f"{quote(schema)}.{quote(table)}" if schema else quote(table)
