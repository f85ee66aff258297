"""The Host, Origin and security-header rules of the dashboard."""
from __future__ import annotations

from blockx.dashboard.guard import allowed_host_names, host_ok, is_loopback_bind, origin_ok, split_host
from blockx.dashboard.headers import security_headers


def test_split_host():
    assert split_host("127.0.0.1:8088") == ("127.0.0.1", "8088")
    assert split_host("LocalHost:1") == ("localhost", "1")
    assert split_host("[::1]:8088") == ("[::1]", "8088")
    assert split_host("example.org") == ("example.org", "")


def test_loopback_answers_its_own_names_only():
    allowed = allowed_host_names("127.0.0.1")
    for ok in ("127.0.0.1:8088", "localhost:8088", "[::1]:8088"):
        assert host_ok(ok, allowed), ok
    for bad in ("evil.example:8088", "127.0.0.1.evil.example:8088", "", None):
        assert not host_ok(bad, allowed), bad       # a DNS-rebinding page names its own host
    assert host_ok("dash.internal:8088", allowed_host_names("127.0.0.1", ["dash.internal"]))
    assert is_loopback_bind("::1") and is_loopback_bind("localhost") and not is_loopback_bind("0.0.0.0")


def test_every_interface_without_names_answers_any_host_and_with_names_only_those():
    assert allowed_host_names("0.0.0.0") is None and host_ok("anything:1", None)
    named = allowed_host_names("0.0.0.0", ["dash.example"])
    assert host_ok("dash.example:8443", named) and not host_ok("other.example:8443", named)
    assert host_ok("10.0.0.5:8088", allowed_host_names("10.0.0.5"))


def test_origin_must_be_the_dashboards_own():
    assert origin_ok("http://127.0.0.1:8088", "http", "127.0.0.1:8088")
    assert not origin_ok("http://127.0.0.1:8089", "http", "127.0.0.1:8088")
    assert not origin_ok("https://127.0.0.1:8088", "http", "127.0.0.1:8088")
    assert not origin_ok("http://evil.example", "http", "127.0.0.1:8088")
    assert not origin_ok(None, "http", "127.0.0.1:8088")
    assert not origin_ok("null", "http", "127.0.0.1:8088")      # a sandboxed frame or a file: page


def test_security_headers():
    h = security_headers("/api/tasks", tls=False)
    csp = h["Content-Security-Policy"]
    assert csp.startswith("default-src 'self'") and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert h["X-Frame-Options"] == "DENY" and h["X-Content-Type-Options"] == "nosniff"
    assert h["Referrer-Policy"] == "no-referrer" and h["Cache-Control"] == "no-store"
    assert "Strict-Transport-Security" not in h
    assert "Strict-Transport-Security" in security_headers("/", tls=True)
    assert "Cache-Control" not in security_headers("/static/app.js", tls=False)
