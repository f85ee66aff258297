"""DuckDB statements the Worker builds, and the errors it words from DuckDB's.

Read-only: DuckDB has no read-only transaction, so a query is accepted only when it
parses to exactly one SELECT statement (`check_select`). A client's query on a
named source (dbscan, the `sql` IO backend) must also be free of side effects
and reveal nothing of the Worker's host (`check_client_select`): a SELECT can
still advance a sequence (nextval), force a checkpoint, run SQL text the check
never saw (query(), json_execute_serialized_sql) or show the database's file
paths and settings (duckdb_databases(), duckdb_settings(), current_setting).
DuckDB's own parser finds every function a query calls: `json_serialize_sql`
gives the parsed tree, walked whole (subqueries, CTEs, lambdas, window and
ORDER BY clauses), never a regular expression over the text. Table functions
must be on an allow-list (range, unnest, ...); scalar functions and catalog
views are refused by name. Every statement the Worker builds runs through
`execute_one`, which refuses a text that parses to several statements: DuckDB's
`execute` would run them all."""

from __future__ import annotations

import json
import threading
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


# Table functions a client's query may call: rows made from the query's own
# values. Any other (read_csv, glob, checkpoint, duckdb_settings, query, ...)
# reads files, changes the database or shows its configuration.
CLIENT_TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest", "json_each", "json_tree", "repeat",
                                    "repeat_row", "icu_calendar_names", "pg_timezone_names"})
# Scalar functions with an effect or that show the Worker's configuration.
REFUSED_SCALARS = frozenset({"nextval", "currval", "setval", "current_setting", "getvariable", "getenv",
                             "json_execute_serialized_sql", "which_secret", "sql_auto_complete"})
REFUSED_PREFIXES = ("duckdb_", "pragma_", "read_", "parquet_", "sqlite_")
# Catalog views that show paths, settings or other sessions' statements.
REFUSED_VIEWS = frozenset({"pg_settings", "pg_prepared_statements"})

_parser_lock = threading.Lock()
_parser: duckdb.DuckDBPyConnection | None = None


def _parse_tree(query: str) -> dict:
    """DuckDB's parse of `query` as JSON, from a private in-memory instance that
    holds no data (the parse binds nothing: no table or function must exist)."""
    global _parser
    with _parser_lock:
        if _parser is None:
            _parser = duckdb.connect(":memory:", config={"enable_external_access": False})
        row = _parser.execute("SELECT json_serialize_sql($1)", [query]).fetchone()
    tree = json.loads(row[0]) if row else {"error": True, "error_message": "no parse"}
    if tree.get("error"):
        raise DataSourceError(f"DuckDB: cannot check the query: {tree.get('error_message', 'unknown error')}")
    return tree


def _refusal(node: Any) -> str | None:
    """The first thing refused in a parsed tree, as a message; None if none."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, list):
            stack.extend(n)
            continue
        if not isinstance(n, dict):
            continue
        kind = n.get("type")
        if kind == "TABLE_FUNCTION":
            fn = n.get("function") or {}
            table_fn = str(fn.get("function_name", "")).lower()
            if table_fn not in CLIENT_TABLE_FUNCTIONS:
                return (f"refused the function {table_fn}: a table function that reads files, changes the "
                        "database or shows its configuration (allowed: " + ", ".join(sorted(CLIENT_TABLE_FUNCTIONS)) + ")")
            # Its arguments and clauses are walked; its own name is checked above.
            stack.extend(v for k, v in fn.items() if k != "function_name" and isinstance(v, (dict, list)))
            stack.extend(v for k, v in n.items() if k != "function" and isinstance(v, (dict, list)))
            continue
        if kind == "BASE_TABLE":
            table = str(n.get("table_name", "")).lower()
            if table in REFUSED_VIEWS or table.startswith(REFUSED_PREFIXES):
                return f"refused the catalog view {table}: it shows the Worker's configuration or files"
        name = n.get("function_name")
        if isinstance(name, str):
            low = name.lower()
            if low in REFUSED_SCALARS or low.startswith(REFUSED_PREFIXES):
                return (f"refused the function {low}: it changes the database (a sequence, a checkpoint), runs "
                        "SQL text or shows the Worker's configuration or files")
        stack.extend(v for v in n.values() if isinstance(v, (dict, list)))
    return None


def check_client_select(query: object) -> str:
    """A client's query: exactly one SELECT (check_select) calling nothing with an
    effect or that shows the host; DataSourceError naming what was refused."""
    check_select(query)
    assert isinstance(query, str)
    problem = _refusal(_parse_tree(query).get("statements", []))
    if problem is not None:
        raise DataSourceError(f"DuckDB: {problem}; only a side-effect-free SELECT runs on a data source")
    return query
