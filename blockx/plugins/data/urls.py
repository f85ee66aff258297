"""Data source URLs, as `dataSources` in the Worker's config names them:

    postgresql://user:secret@host:5432/db   (also postgres://)   -> asyncpg pool
    duckdb:///absolute/path/file.duckdb                           -> embedded DuckDB file
    duckdb://:memory:                                             -> in-memory DuckDB (tests)

One place parses them: the config's rule for `dataSources` (data_source_problems)
uses it to reject a bad URL at start-up, and the data plane uses it to open the
source."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

SOURCE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
POSTGRES = "postgresql"
DUCKDB = "duckdb"
MEMORY = ":memory:"


class SourceURL(NamedTuple):
    kind: str        # POSTGRES or DUCKDB
    target: str      # the asyncpg DSN, or the DuckDB path (MEMORY for in-memory)


def parse_source_url(name: str, url: object) -> SourceURL:
    """The parsed URL of source `name`; ValueError with the reason (never echoing
    the URL, which may hold a password)."""
    if not isinstance(name, str) or not SOURCE_NAME.match(name):
        raise ValueError(f"source name {name!r} must start with a letter and hold only letters, "
                         "digits, '_' or '-' (at most 64)")
    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"source {name!r}: the URL must be a non-empty string")
    url = url.strip()
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"source {name!r}: the URL has no scheme (expected postgresql:// or duckdb://)")
    scheme = scheme.lower()
    if scheme in ("postgresql", "postgres"):
        if not rest or rest.startswith("/"):
            raise ValueError(f"source {name!r}: a postgresql:// URL needs a host "
                             "(postgresql://user@host:5432/db)")
        return SourceURL(POSTGRES, "postgresql://" + rest)
    if scheme == DUCKDB:
        if rest == MEMORY:
            return SourceURL(DUCKDB, MEMORY)
        if not rest.startswith("/") or rest == "/":
            raise ValueError(f"source {name!r}: a duckdb URL names an absolute file path "
                             "(duckdb:///var/lib/blockx/local.duckdb) or duckdb://:memory:")
        return SourceURL(DUCKDB, rest)
    raise ValueError(f"source {name!r}: unsupported scheme {scheme!r} (expected postgresql:// or duckdb://)")


def data_source_problems(sources: Mapping[str, object], setting: str) -> list[str]:
    """The rule of `dataSources` (named `setting` in the messages): every entry
    parses, and no message echoes a URL."""
    out = []
    for name, url in sources.items():
        try:
            parse_source_url(name, url)
        except ValueError as exc:
            out.append(f"{setting}: {exc}")
    return out
