"""DuckDB statements the Worker builds, and the errors it words from DuckDB's.

Read-only: DuckDB has no read-only transaction, so a query is accepted only when it
parses to exactly one SELECT statement (`check_select`). Every statement the Worker
builds runs through `execute_one`, which refuses a text that parses to several
statements: DuckDB's `execute` would run them all."""

from __future__ import annotations

from typing import Any

import duckdb

from blockx.plugins.data.errors import DataSourceError


def db_error(exc: Exception) -> DataSourceError:
    return DataSourceError("DuckDB: " + " ".join(str(exc).split()))


def out_of_memory(exc: Exception, limit_mb: int, rows: int) -> DataSourceError | None:
    """A clear error for a write DuckDB's buffer pool could not hold (its own text
    suggests `SET memory_limit`, which no task can run on a locked source). `rows`:
    the rows the transaction had taken when it failed."""
    text = str(exc)
    if not (isinstance(exc, duckdb.OutOfMemoryException) or "could not allocate block" in text
            or "failed to pin block" in text):
        return None
    what = " ".join(text.split("Possible solutions")[0].split())
    limit = f"{limit_mb} MiB" if limit_mb else "0: DuckDB's own"
    return DataSourceError(
        f"DuckDB: {what}: the transaction's {rows} rows need more than dataPlane.duckdbMemoryLimitMb "
        f"({limit}) holds. DuckDB keeps the primary-key index of the rows one transaction adds to a table "
        "in memory, and at COMMIT that index and the table's side by side (with a BIGINT key about 16 bytes "
        "a new key: 10,000,000 new keys commit at 160 MiB, not at 128; a table the task creates is built "
        "aside and needs far less); raise dataPlane.duckdbMemoryLimitMb, or split the task so that each "
        "writes fewer rows")


def check_select(query: object) -> str:
    """The query, if it is exactly one SELECT statement; DataSourceError otherwise."""
    if not isinstance(query, str) or not query.strip():
        raise DataSourceError("the query must be a non-empty string")
    try:
        stmts = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise db_error(exc) from None
    if len(stmts) != 1:
        raise DataSourceError(f"only one statement is accepted, got {len(stmts)}")
    if stmts[0].type != duckdb.StatementType.SELECT:
        raise DataSourceError(f"only a read-only SELECT is accepted, got a {stmts[0].type.name} statement")
    return query


def execute_one(cur: Any, sql: str, params: Any = None) -> duckdb.DuckDBPyConnection:
    """Run `sql` if it is exactly one statement; DataSourceError otherwise."""
    try:
        n = len(duckdb.extract_statements(sql))
    except duckdb.Error as exc:
        raise db_error(exc) from None
    if n != 1:
        raise DataSourceError(f"DuckDB: refused a built statement that parses to {n} statements")
    return cur.execute(sql, params) if params is not None else cur.execute(sql)
