"""The one identifier rule and quoting, for configured names and data alike."""
import pytest

from blockx.plugins.data.idents import check_ident, quote, quoted_table, split_table

BAD = [
    'a"b',                      # ends the quoted identifier
    'x" BIGINT); DROP TABLE victim; --',
    "a;b", "a--b", "a(b)", "a b", "a.b", "1abc", "", "é", "a\x00b",
    "id\n",                     # '$' would match before a trailing newline
    "a" * 64,                   # PostgreSQL truncates past 63
]


@pytest.mark.parametrize("name", ["id", "_x", "camelCase", "with_digits_2", "A" * 63])
def test_plain_names_pass(name):
    assert check_ident("column", name) == name


@pytest.mark.parametrize("name", BAD + [None, 5, ["id"]])
def test_anything_else_is_refused_by_name(name):
    with pytest.raises(ValueError) as ei:
        check_ident("column", name)
    assert "not a plain SQL identifier" in str(ei.value)
    assert repr(name)[:50] in str(ei.value)


def test_a_long_name_is_shown_cut():
    with pytest.raises(ValueError) as ei:
        check_ident("column", "x" * 100_000)
    assert len(str(ei.value)) < 400


@pytest.mark.parametrize("name,want", [
    ("id", '"id"'),
    ('a"b', '"a""b"'),
    ('"', '""""'),
    ('x" , (SELECT 1) AS "y', '"x"" , (SELECT 1) AS ""y"'),
])
def test_quote_doubles_embedded_quotes(name, want):
    assert quote(name) == want


def test_quote_survives_duckdb_parsing_as_one_identifier():
    import duckdb
    name = 'a" , (SELECT 42) AS "leak'
    con = duckdb.connect()
    cur = con.execute(f"SELECT 1 AS {quote(name)}")
    assert [d[0] for d in cur.description] == [name]


def test_tables():
    assert split_table("app.results") == ("app", "results")
    assert quoted_table("app", "results") == '"app"."results"'
    for bad in ("a.b.c", 'a".b', "t; DROP TABLE x", "t\n"):
        with pytest.raises(ValueError):
            split_table(bad)
