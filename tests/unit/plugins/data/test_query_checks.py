"""The query checks of both databases, without a server: which texts a client
may send to a data source (pg_sql.check_plain_query, duck_sql.check_client_select).
tests/integration/data/test_hostile_queries.py runs the same attacks against real
databases; here the edge cases of the parsing itself."""
from __future__ import annotations

import pytest

from blockx.plugins.data.duck_sql import check_client_select, check_select
from blockx.plugins.data.errors import DataSourceError
from blockx.plugins.data.pg_sql import check_plain_query, refused_function


@pytest.mark.parametrize("query", [
    "SELECT 1", "SELECT 1;", "  select $1::int + 1  ", "VALUES (1), (2)", "TABLE t",
    "(SELECT 1) UNION ALL (SELECT 2)", "WITH x AS (SELECT 1 AS a) SELECT a FROM x",
    "SELECT 'pg_terminate_backend(1); SET x = 1' AS s -- pg_sleep(1); PREPARE",
    "SELECT \"pg_sleep\"(0.01)", "SELECT * FROM t WHERE id = ANY($1::bigint[]) ORDER BY id LIMIT 5",
    "SELECT $$ DO $$ AS dollar_quoted",
])
def test_pg_plain_queries_pass(query):
    assert check_plain_query(query) == query


@pytest.mark.parametrize("query,needle", [
    ("PREPARE __asyncpg_stmt_44__ AS SELECT 1", "refused the PREPARE statement"),
    ("/* a comment */ EXECUTE p", "refused the EXECUTE statement"),
    ("RESET ALL", "refused the RESET statement"),
    ("SET LOCAL statement_timeout = 0", "refused the SET statement"),
    ("SELECT 1; SELECT 2", "refused 2 statements"),
    ("SELECT 1 /* ; */ ; DO $$ BEGIN END $$", "refused 2 statements"),
    ("SELECT PG_TERMINATE_BACKEND(1)", "refused the function pg_terminate_backend"),
    ("SELECT pg_catalog.set_config('a.b', '1', false)", "refused the function set_config"),
    ("SELECT * FROM (SELECT pg_advisory_lock(1)) s", "refused the function pg_advisory_lock"),
    ("SELECT (SELECT max(x) FROM t WHERE pg_notify('c', 'x') IS NULL)", "refused the function pg_notify"),
    ("WITH u AS (UPDATE t SET x = 1 RETURNING x) SELECT * FROM u", "refused a data-modifying UPDATE"),
    ("SELECT * FROM t FOR SHARE", "FOR UPDATE/SHARE"),
    ("SELEC 1", "syntax error"),
])
def test_pg_what_is_refused_and_named(query, needle):
    with pytest.raises(DataSourceError) as ei:
        check_plain_query(query)
    assert needle in ei.value.message and not ei.value.retryable, ei.value.message


def test_pg_refused_function_names_are_matched_whole_or_by_family():
    assert refused_function("pg_advisory_unlock_all") and refused_function("LO_EXPORT")
    assert not refused_function("pg_sleep") and not refused_function("lower") and not refused_function("now")


@pytest.mark.parametrize("query", [
    "SELECT 1", "FROM range(3)", "SELECT * FROM generate_series(1, 3) g(i), unnest([1, 2]) u(x)",
    "SELECT list_transform([1], lambda x: x + 1)", "SELECT 'nextval(1)' AS s", "SELECT $1::INT",
    "SELECT * FROM information_schema.tables",
])
def test_duck_side_effect_free_selects_pass(query):
    assert check_client_select(query) == query


@pytest.mark.parametrize("query,needle", [
    ("SELECT NextVal('s')", "refused the function nextval"),
    ("SELECT * FROM Force_Checkpoint()", "refused the function force_checkpoint"),
    ("SELECT * FROM range(3) r, LATERAL (SELECT * FROM duckdb_databases()) d", "refused the function duckdb_databases"),
    ("SELECT * FROM range((SELECT nextval('s')))", "refused the function nextval"),
    ("SELECT * FROM pragma_database_list", "refused the catalog view pragma_database_list"),
    ("SELECT * FROM pg_catalog.pg_settings", "refused the catalog view pg_settings"),
    ("SELECT 1; SELECT 2", "only one statement"),
    ("PRAGMA database_list", "only a read-only SELECT"),
    ("INSERT INTO t VALUES (1)", "only a read-only SELECT"),
])
def test_duck_what_is_refused_and_named(query, needle):
    with pytest.raises(DataSourceError) as ei:
        check_client_select(query)
    assert needle in ei.value.message and not ei.value.retryable, ei.value.message


def test_duck_built_statements_keep_the_plain_select_check():
    """A bundle source's private instance runs queries the Worker built
    (read_parquet of the files it matched): the function check is for clients."""
    assert check_select("SELECT * FROM read_parquet(['a.parquet'])")
