"""SQL identifiers: table, key and column names, from configs and from data alike.

One rule for every name that becomes part of SQL text, whoever wrote it (an
operator's writer config, a payload's column list, or a field name in a
function's output): letters, digits and '_', not starting with a digit, at most
63 characters (PostgreSQL's limit). A name that passes is always double-quoted
when spliced, and `quote` doubles an embedded quote besides, so no name can end
the identifier early whatever reaches it."""

from __future__ import annotations

from typing import TypeGuard

import re

MAX_IDENT = 63
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,%d}" % (MAX_IDENT - 1))
RULE = f"letters, digits and '_', not starting with a digit, at most {MAX_IDENT}"
SHOWN_CHARS = 200


def is_ident(name: object) -> TypeGuard[str]:
    """True when `name` is a plain SQL identifier (the whole string, no trailing newline)."""
    return isinstance(name, str) and _IDENT.fullmatch(name) is not None


def shown(name: object) -> str:
    """repr(name) for a message, cut to a bounded length (a field name is data)."""
    text = repr(name)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def check_ident(what: str, name: object) -> str:
    if not is_ident(name):
        raise ValueError(f"{what} {shown(name)} is not a plain SQL identifier ({RULE})")
    return name


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def split_table(name: object) -> tuple[str | None, str]:
    """'results' -> (None, 'results'); 'app.results' -> ('app', 'results')."""
    if not isinstance(name, str):
        raise ValueError(f"table must be a string, got {type(name).__name__}")
    parts = name.split(".")
    if len(parts) > 2:
        raise ValueError(f"table {shown(name)}: at most schema.table")
    for p in parts:
        check_ident("table", p)
    return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])


def quoted_table(schema: str | None, table: str) -> str:
    return f"{quote(schema)}.{quote(table)}" if schema else quote(table)
