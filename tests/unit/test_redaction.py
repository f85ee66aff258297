"""blockx.redaction: each form a secret takes in a URL, a header or free text is
hidden; what names the server and the setting stays readable."""
import pytest

from blockx.redaction import redact_headers, redact_text, redact_url, redact_value


@pytest.mark.parametrize("url, shown, hidden", [
    ("postgresql://blockx:s3cret-pw@db.internal:5432/chain", "postgresql://blockx:***@db.internal:5432/chain",
     "s3cret-pw"),
    ("redis://:redis-pw-42@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0", "redis-pw-42"),
    ("rediss://default:pw-tls-9@cache:6380/1", "rediss://default:***@cache:6380/1", "pw-tls-9"),
    ("postgresql://db/chain?user=blockx&password=qpw-123&sslmode=require",
     "postgresql://db/chain?user=blockx&password=***&sslmode=require", "qpw-123"),
    ("postgresql://db/chain?sslmode=verify-full&sslpassword=keypass-77",
     "postgresql://db/chain?sslmode=verify-full&sslpassword=***", "keypass-77"),
    ("https://rpc.example/v1?apikey=AK-9f8e7d", "https://rpc.example/v1?apikey=***", "AK-9f8e7d"),
    ("https://rpc.example/?API_KEY=abc-1&chain=1", "https://rpc.example/?API_KEY=***&chain=1", "abc-1"),
    ("https://rpc.example/?access_token=tok-55&x-api-key=k-66&Secret=s-77&pwd=p-88&passwd=p-99"
     "&authToken=a-11&credential=c-22",
     "https://rpc.example/?access_token=***&x-api-key=***&Secret=***&pwd=***&passwd=***&authToken=***"
     "&credential=***", "tok-55"),
    ("https://9f8e7d6c5b4a39281706f5e4d3c2b1a0@rpc.example/", "https://***@rpc.example/",
     "9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
    ("https://mainnet.rpc.example/v3/9aa3d95b3bc440fa88ea12eaa4456161",
     "https://mainnet.rpc.example/v3/***", "9aa3d95b3bc440fa88ea12eaa4456161"),
    ("http://user:pa%40ss@h:8545/", "http://user:***@h:8545/", "pa%40ss"),
])
def test_every_form_of_a_secret_in_a_url_is_hidden(url, shown, hidden):
    assert redact_url(url) == shown
    assert hidden not in redact_url(url)


@pytest.mark.parametrize("url", [
    "duckdb:///var/lib/blockx/local.duckdb", "postgresql://blockx@db:5432/chain?sslmode=require",
    "redis://127.0.0.1:6379/0", "unix:///run/redis.sock", "http://127.0.0.1:8545/", "localhost:2379",
    "https://rpc.example/v1/eth/mainnet?chain=1&keepalive=true",
])
def test_a_url_without_a_secret_is_unchanged(url):
    assert redact_url(url) == url


def test_header_values_are_hidden_and_env_references_stay():
    assert redact_headers({"Authorization": "Bearer abc", "X-Api-Key": "k", "X-Tag": {"env": "RPC_KEY"}}) == {
        "Authorization": "***", "X-Api-Key": "***", "X-Tag": {"env": "RPC_KEY"}}


def test_free_text_has_every_url_and_bearer_token_redacted():
    text = ('cannot connect to "postgresql://u:pw-1@db/x?sslpassword=pw-2": refused; '
            "then https://rpc.example/?apikey=pw-3, header Authorization: Bearer tok-0123456789abcdef")
    out = redact_text(text)
    for secret in ("pw-1", "pw-2", "pw-3", "tok-0123456789abcdef"):
        assert secret not in out
    assert 'postgresql://u:***@db/x?sslpassword=***"' in out and "Bearer ***" in out
    plain = "task_finished taskId=t-1 state=SUCCEEDED"
    assert redact_text(plain) is plain


def test_config_values_are_redacted_in_depth():
    endpoints = {"main": {"urls": ["https://a:pw-1@n1/", "https://n2/?apikey=pw-2"],
                          "headers": {"X-Key": "pw-3", "Y": {"env": "VAR"}}, "timeoutMs": 10}}
    out = redact_value(endpoints)
    assert out == {"main": {"urls": ["https://a:***@n1/", "https://n2/?apikey=***"],
                            "headers": {"X-Key": "***", "Y": {"env": "VAR"}}, "timeoutMs": 10}}
    assert redact_value({"tokens": "duckdb:///x.duckdb"}) == {"tokens": "duckdb:///x.duckdb"}  # names stay
