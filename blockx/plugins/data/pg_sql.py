"""Which client queries a PostgreSQL source runs: a plain query, checked before it
is sent, with PostgreSQL's own grammar (libpg_query, through pglast).

A client's dbscan or `sql` query shares the source's pooled connections, and its
role, with every other client's. A READ ONLY transaction stops writes, and the
statement timeout bounds time, but neither stops a statement that changes the
session (PREPARE, SET, LISTEN), takes a lock, runs other statements (EXECUTE,
DO, CALL) or a function that acts on other sessions (pg_terminate_backend,
pg_advisory_lock, set_config). So exactly one SELECT, VALUES or TABLE statement
is accepted, without INTO, FOR UPDATE/SHARE or a data-modifying WITH, and
calling none of REFUSED_FUNCTIONS, found by walking the whole parse tree
(libpg_query's JSON: subqueries, CTEs, joins, every clause). The function list is a second layer: a view
or a function the role may call can still reach them, which only the role's
own grants stop (docs/data-plane.md, "The database role")."""

from __future__ import annotations

import json
from typing import Any

from pglast.parser import ParseError, parse_sql_json

from blockx.plugins.data.errors import DataSourceError

PLAIN = "only a plain read-only query (one SELECT, VALUES or TABLE statement) runs on a data source"

# Functions that act beyond the query that calls them: on other sessions, the
# session's settings or locks, the server's files or configuration, or that run
# SQL text the check never saw. Exact names, then name prefixes (lower case).
REFUSED_FUNCTIONS = frozenset({
    "pg_terminate_backend", "pg_cancel_backend", "pg_reload_conf", "pg_rotate_logfile", "pg_promote",
    "pg_log_backend_memory_contexts", "pg_switch_wal", "pg_create_restore_point", "pg_export_snapshot",
    "pg_backup_start", "pg_backup_stop", "pg_start_backup", "pg_stop_backup", "pg_wal_replay_pause",
    "pg_wal_replay_resume", "pg_logical_emit_message", "pg_drop_replication_slot", "pg_current_logfile",
    "set_config", "pg_notify", "nextval", "setval",
    "query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema",
    "cursor_to_xml", "cursor_to_xmlschema",
    "pg_read_file", "pg_read_binary_file", "pg_stat_file", "loread", "lowrite",
})
REFUSED_PREFIXES = ("pg_advisory_", "pg_try_advisory_", "pg_stat_reset", "pg_replication_", "pg_create_",
                    "pg_ls_", "pg_file_", "lo_", "dblink")

# The statement's keyword, for a message, by parse node.
_KEYWORDS = {
    "PrepareStmt": "PREPARE", "ExecuteStmt": "EXECUTE", "DeallocateStmt": "DEALLOCATE",
    "VariableShowStmt": "SHOW", "LockStmt": "LOCK", "ListenStmt": "LISTEN", "NotifyStmt": "NOTIFY",
    "UnlistenStmt": "UNLISTEN", "DoStmt": "DO", "CallStmt": "CALL", "CopyStmt": "COPY",
    "DeclareCursorStmt": "DECLARE", "FetchStmt": "FETCH", "ClosePortalStmt": "CLOSE", "DiscardStmt": "DISCARD",
    "ExplainStmt": "EXPLAIN", "InsertStmt": "INSERT", "UpdateStmt": "UPDATE", "DeleteStmt": "DELETE",
    "MergeStmt": "MERGE", "CreateTableAsStmt": "CREATE TABLE AS", "CheckPointStmt": "CHECKPOINT",
    "VacuumStmt": "VACUUM", "LoadStmt": "LOAD",
}


def refused_function(name: str) -> bool:
    n = name.lower()
    return n in REFUSED_FUNCTIONS or n.startswith(REFUSED_PREFIXES)


def _keyword(kind: str, text: str) -> str:
    if kind == "VariableSetStmt":
        return "RESET" if text.lstrip().upper().startswith("RESET") else "SET"
    if kind == "TransactionStmt":
        words = text.split()
        return words[0].upper() if words else "transaction"
    return _KEYWORDS.get(kind) or kind.removesuffix("Stmt").upper()


_WRITES = ("InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt")


def _refusal(tree: Any) -> str | None:
    """The first thing refused in a SELECT's parse tree (libpg_query's JSON, each
    node a one-key object named for its type), walked whole; None if none."""
    stack = [tree]
    while stack:
        n = stack.pop()
        if isinstance(n, list):
            stack.extend(n)
            continue
        if not isinstance(n, dict):
            continue
        for kind, node in n.items():
            if kind == "FuncCall" and isinstance(node, dict):
                names = node.get("funcname") or []
                name = str((names[-1].get("String") or {}).get("sval", "")) if names else ""
                if refused_function(name):
                    return (f"refused the function {name.lower()}: it acts beyond the query (on other sessions, "
                            "locks, settings or the server's files)")
            elif kind == "SelectStmt" and isinstance(node, dict):
                if node.get("intoClause"):
                    return "refused SELECT ... INTO: it creates a table"
                if node.get("lockingClause"):
                    return "refused SELECT ... FOR UPDATE/SHARE: it locks rows"
            elif kind in _WRITES:
                return f"refused a data-modifying {_KEYWORDS[kind]} inside the query"
            if isinstance(node, (dict, list)):
                stack.append(node)
    return None


def check_plain_query(query: object) -> str:
    """The query, if it is one plain query calling no refused function;
    DataSourceError (not retryable) naming what was refused otherwise."""
    if not isinstance(query, str) or not query.strip():
        raise DataSourceError("the query must be a non-empty string")
    try:
        stmts = json.loads(parse_sql_json(query)).get("stmts", [])
    except ParseError as exc:
        raise DataSourceError(f"PostgreSQL: {exc}") from None
    if len(stmts) != 1:
        raise DataSourceError(f"refused {len(stmts)} statements: {PLAIN}")
    raw = stmts[0]
    kind, tree = next(iter(raw["stmt"].items()))
    if kind != "SelectStmt":
        start, length = raw.get("stmt_location", 0), raw.get("stmt_len", 0)
        data = query.encode()
        text = (data[start:start + length] if length else data[start:]).decode(errors="replace")
        raise DataSourceError(f"refused the {_keyword(kind, text)} statement: {PLAIN}")
    problem = _refusal(raw["stmt"])
    if problem is not None:
        raise DataSourceError(f"{problem}; {PLAIN}")
    return query
