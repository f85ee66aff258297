"""SessionStore: bounded, expiring, keyed by the cookie id's digest; CSRF compared whole."""
from __future__ import annotations

import pytest

from blockx.dashboard.sessions import SessionStore, token_fingerprint


def test_a_session_is_found_by_its_id_only_and_touched():
    store = SessionStore(idle_s=10, max_age_s=100)
    sid, s = store.create("tok-aaaaaaaaaaaaaaaa", admin=False, identity="tenant x", now=0.0)
    assert store.get(sid, 5.0) is s and s.last_seen == 5.0
    assert store.get(sid + "x", 5.0) is None
    assert store.get("", 5.0) is None and store.get(None, 5.0) is None
    assert store.get("a" * 500, 5.0) is None
    assert sid.encode() not in repr(store._by_key).encode()      # the ids themselves are not kept


def test_idle_and_absolute_expiry():
    store = SessionStore(idle_s=10, max_age_s=25)
    sid, _ = store.create("t" * 16, admin=True, identity="admin", now=0.0)
    assert store.get(sid, 9.0) is not None
    assert store.get(sid, 18.0) is not None       # 9 s idle
    assert store.get(sid, 26.0) is None           # past max age although it was used 8 s before
    sid2, _ = store.create("t" * 16, admin=True, identity="admin", now=100.0)
    assert store.get(sid2, 111.0) is None         # 11 s idle
    assert len(store) == 0


def test_the_capacity_drops_the_least_recently_used():
    store = SessionStore(capacity=2)
    a, _ = store.create("a" * 16, admin=False, identity="a", now=0.0)
    b, _ = store.create("b" * 16, admin=False, identity="b", now=1.0)
    assert store.get(a, 2.0) is not None          # a is now the most recent
    c, _ = store.create("c" * 16, admin=False, identity="c", now=3.0)
    assert len(store) == 2
    assert store.get(b, 3.0) is None and store.get(a, 3.0) is not None and store.get(c, 3.0) is not None
    assert store.tokens() == {"a" * 16, "c" * 16}


def test_csrf_must_match_whole():
    store = SessionStore()
    _sid, s = store.create("t" * 16, admin=False, identity="x", now=0.0)
    assert s.csrf_ok(s.csrf)
    for bad in ("", None, s.csrf[:-1], s.csrf + "a", "x" * len(s.csrf)):
        assert not s.csrf_ok(bad)


def test_drop_and_bad_capacity():
    store = SessionStore()
    sid, _ = store.create("t" * 16, admin=False, identity="x", now=0.0)
    store.drop(sid)
    assert store.get(sid, 0.0) is None
    with pytest.raises(ValueError):
        SessionStore(capacity=0)


def test_the_fingerprint_names_a_token_without_showing_it():
    fp = token_fingerprint("alice-secret-token-1234")
    assert fp == token_fingerprint("alice-secret-token-1234") and len(fp) == 10
    assert fp not in "alice-secret-token-1234" and fp != token_fingerprint("bob-secret-token-12345")
