"""EtcdPublisher configuration: endpoint parsing, validation, backoff (no server needed)."""

from __future__ import annotations

import pytest

from blockx.adapters.etcd_publisher import EtcdPublisher, PublisherState, parse_endpoints


@pytest.mark.parametrize(("value", "want"), [
    ("127.0.0.1:2379", [("127.0.0.1", 2379)]),
    ("http://etcd-a:2379, http://etcd-b:2380/", [("etcd-a", 2379), ("etcd-b", 2380)]),
    (["h1:1", "h2"], [("h1", 1), ("h2", 2379)]),
    ("[::1]:2379", [("::1", 2379)]),
    ("[fe80::1]", [("fe80::1", 2379)]),
    ("none", []), ("NONE", []), ("", []), (" , ", []), (None, []), ([], []),
])
def test_parse_endpoints(value, want):
    assert parse_endpoints(value) == want


@pytest.mark.parametrize(("value", "match"), [
    ("https://h:2379", "TLS"),
    ("h:port", "not a number"),
    ("h:0", "out of range"),
    (":2379", "missing host"),
    ("::1:2379", "IPv6"),
    ("[::1", "IPv6"),
    ("none,h:1", "cannot be combined"),
])
def test_parse_endpoints_rejects(value, match):
    with pytest.raises(ValueError, match=match):
        parse_endpoints(value)


def test_key_and_initial_state():
    p = EtcdPublisher("127.0.0.1:1", "/blockx/workers/", "10.0.0.1:8081", dict)
    assert p.key == b"/blockx/workers/10.0.0.1:8081"
    assert p.enabled and p.state == PublisherState.IDLE
    assert p.endpoints == ["127.0.0.1:1"]


@pytest.mark.parametrize(("kw", "match"), [
    ({"interval_ms": 0}, "interval"),
    ({"lease_ttl_s": 0}, "TTL"),
    ({"backoff_initial_ms": 500, "backoff_max_ms": 100}, "backoff"),
])
def test_rejects_bad_settings(kw, match):
    with pytest.raises(ValueError, match=match):
        EtcdPublisher("h:1", "/p/", "a:1", dict, **kw)


def test_enabled_publisher_needs_worker_addr():
    with pytest.raises(ValueError, match="worker_addr"):
        EtcdPublisher("h:1", "/p/", "", dict)


def test_backoff_doubles_to_the_cap_with_bounded_jitter():
    p = EtcdPublisher("h:1", "/p/", "a:1", dict, backoff_initial_ms=200, backoff_max_ms=5000,
                      rand=lambda: 0.5)
    assert [round(p._backoff(n), 3) for n in range(1, 8)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    low = EtcdPublisher("h:1", "/p/", "a:1", dict, rand=lambda: 0.0)
    high = EtcdPublisher("h:1", "/p/", "a:1", dict, rand=lambda: 0.999999)
    assert low._backoff(1) == pytest.approx(0.16)
    assert high._backoff(1) == pytest.approx(0.24, rel=1e-4)
    assert low._backoff(10_000) == pytest.approx(4.0)  # huge failure counts do not overflow
