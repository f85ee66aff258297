import pytest

from blockx.plugins.data.urls import DUCKDB, MEMORY, POSTGRES, SourceURL, parse_source_url


@pytest.mark.parametrize("url,want", [
    ("postgresql://u:pw@db:5432/app", SourceURL(POSTGRES, "postgresql://u:pw@db:5432/app")),
    ("postgres://u@db/app", SourceURL(POSTGRES, "postgresql://u@db/app")),
    ("duckdb:///var/lib/blockx/local.duckdb", SourceURL(DUCKDB, "/var/lib/blockx/local.duckdb")),
    ("duckdb://:memory:", SourceURL(DUCKDB, MEMORY)),
])
def test_good_urls(url, want):
    assert parse_source_url("main", url) == want


@pytest.mark.parametrize("name,url,needle", [
    ("main", "mysql://u:secret@h/db", "unsupported scheme 'mysql'"),
    ("main", "duckdb://relative.duckdb", "absolute file path"),
    ("main", "postgresql:///db", "needs a host"),
    ("main", "db.example", "has no scheme"),
    ("main", "", "non-empty string"),
    ("main", 5, "non-empty string"),
    ("1st", "duckdb://:memory:", "must start with a letter"),
    ("a b", "duckdb://:memory:", "must start with a letter"),
])
def test_bad_urls_never_echo_the_url(name, url, needle):
    with pytest.raises(ValueError) as ei:
        parse_source_url(name, url)
    assert needle in str(ei.value)
    assert "secret" not in str(ei.value)
