"""The dashboard's app at its boundary, over real HTTP on loopback (aiohttp's test
server): the Host, Origin, content-type and CSRF checks, the login requirement,
the fleet's address list as the only workers a request may name, the page
tokens, the static files and the headers on every answer. No worker is needed:
each request here is answered (or refused) before one would be dialled."""
from __future__ import annotations

import re
import time
from importlib import resources

import pytest
from aiohttp.test_utils import TestClient, TestServer

from blockx.dashboard.app import Dashboard, DashboardConfig, _read_cursor, _write_cursor
from blockx.dashboard.clients import ClientPool
from blockx.dashboard.fleet import FleetSource
from blockx.dashboard.guard import allowed_host_names

KNOWN = "127.0.0.1:1"         # a fleet address nothing listens on: any dial would fail, and none is made


@pytest.fixture
async def client():
    dash = Dashboard(FleetSource(addrs=[KNOWN]), ClientPool(None, clock=time.monotonic),
                     DashboardConfig(allowed_hosts=allowed_host_names("127.0.0.1")))
    async with TestClient(TestServer(dash.app(), host="127.0.0.1")) as c:
        c.dash = dash
        yield c


def _session(c, admin: bool = False):
    sid, s = c.dash.sessions.create("tenant-token-0123456789", admin=admin, identity="tenant x",
                                    now=c.dash.clock())
    return {"Cookie": f"{c.dash.cookie}={sid}"}, s


def _origin(c) -> str:
    return f"http://{c.server.host}:{c.server.port}"


async def test_every_answer_carries_the_headers_even_a_refusal(client):
    for path in ("/", "/static/app.js", "/static/nope.js", "/api/fleet", "/nowhere"):
        r = await client.get(path)
        assert r.headers["Content-Security-Policy"].startswith("default-src 'self'"), path
        assert r.headers["X-Frame-Options"] == "DENY" and r.headers["X-Content-Type-Options"] == "nosniff"
    assert (await client.get("/static/nope.js")).status == 404
    assert (await client.get("/static/..%2fapp.py")).status == 404


async def test_a_foreign_host_gets_421(client):
    r = await client.get("/", headers={"Host": "rebound.evil.example:80"})
    assert r.status == 421
    r = await client.post("/api/login", json={"token": "x" * 20},
                          headers={"Host": "rebound.evil.example", "Origin": "http://rebound.evil.example"})
    assert r.status == 421


async def test_the_api_needs_a_session_but_me_answers_politely(client):
    r = await client.get("/api/me")
    assert r.status == 200 and (await r.json()) == {"logged_in": False}
    for path in ("/api/fleet", "/api/tasks", f"/api/task?worker={KNOWN}&id=t", "/api/fleet/events"):
        r = await client.get(path)
        assert r.status == 401, path
    r = await client.get("/api/fleet", headers={"Cookie": f"{client.dash.cookie}=made-up"})
    assert r.status == 401


async def test_post_checks_origin_content_type_and_csrf(client):
    headers, s = _session(client)
    body = {"worker": KNOWN, "task_id": "t1"}
    origin = _origin(client)
    cases = [
        ({**headers}, 403),                                                           # no Origin
        ({**headers, "Origin": "http://evil.example"}, 403),
        ({**headers, "Origin": origin}, 403),                                         # no CSRF token
        ({**headers, "Origin": origin, "X-CSRF-Token": s.csrf[:-1]}, 403),
    ]
    for h, want in cases:
        r = await client.post("/api/task/cancel", json=body, headers=h)
        assert r.status == want, (h, await r.text())
    r = await client.post("/api/task/cancel", data="worker=x", headers={**headers, "Origin": origin,
                          "X-CSRF-Token": s.csrf, "Content-Type": "application/x-www-form-urlencoded"})
    assert r.status == 415
    # with every check passed the request goes on, and is refused for the address it names
    r = await client.post("/api/task/cancel", json={**body, "worker": "10.9.9.9:8081"},
                          headers={**headers, "Origin": origin, "X-CSRF-Token": s.csrf})
    assert r.status == 404 and "no worker" in (await r.json())["error"]
    r = await client.post("/api/login", json={"token": "x" * 20}, headers={"Origin": "http://evil.example"})
    assert r.status == 403


async def test_only_the_fleets_addresses_and_valid_arguments(client):
    headers, _s = _session(client)
    for path in ("/api/task?worker=10.1.1.1:22&id=t", "/api/task/timeline?worker=169.254.169.254:80&id=t",
                 "/api/task/trace.json?id=t", "/api/tasks?worker=evil:1"):
        r = await client.get(path, headers=headers)
        assert r.status == 404, path
    r = await client.get(f"/api/task?worker={KNOWN}&id=", headers=headers)
    assert r.status == 400
    r = await client.get("/api/tasks?state=BOGUS", headers=headers)
    assert r.status == 400 and "unknown state" in (await r.json())["error"]
    r = await client.get("/api/tasks?page=not-ours", headers=headers)
    assert r.status == 400


async def test_login_refuses_malformed_tokens_before_any_rpc(client):
    origin = {"Origin": _origin(client)}
    for body in ({"token": ""}, {"token": "has space inside"}, {"token": "x" * 600}, {"nope": 1}, ["x"]):
        r = await client.post("/api/login", json=body, headers=origin)
        assert r.status == 400, body
    assert len(client.dash.pool) == 0


async def test_logout_ends_the_session(client):
    headers, s = _session(client)
    r = await client.post("/api/logout", json={}, headers={**headers, "Origin": _origin(client),
                                                          "X-CSRF-Token": s.csrf})
    assert r.status == 200
    assert (await client.get("/api/fleet", headers=headers)).status == 401


def test_page_tokens_round_trip_and_refuse_other_workers():
    c = {"a:1": "tok1", "b:2": "tok2"}
    assert _read_cursor(_write_cursor(c), ["a:1", "b:2"]) == c
    assert _read_cursor("", ["a:1"]) == {"a:1": ""}
    assert _read_cursor(_write_cursor(c), ["a:1"]) is None                 # names a worker not in the fleet
    assert _read_cursor("!!!", ["a:1"]) is None and _read_cursor(_write_cursor({"a:1": ""}), ["a:1"]) is None


def test_the_page_has_no_inline_script_or_style_and_no_external_reference():
    static = resources.files("blockx.dashboard").joinpath("static")
    html = static.joinpath("index.html").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)", html)
    assert not re.search(r"\son[a-z]+=", html) and "style=" not in html and "<style" not in html
    for name in ("index.html", "app.js", "app.css", "icon.svg"):
        text = static.joinpath(name).read_text()
        urls = re.findall(r"(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}", text)
        assert urls == [] or all(u.endswith("www.w3.org") for u in urls), (name, urls)    # the SVG namespace only
    js = static.joinpath("app.js").read_text()
    assert "innerHTML" not in js and "eval(" not in js and "document.write" not in js
