"""The dashboard pages a Worker serves for itself (DASHBOARD_LISTEN, off by default),
over plain http and under the Worker's own TLS, and the client pool a live view
holds: against real Workers with token auth, over HTTP on loopback (the pages
themselves are driven in Chromium by tests/e2e/test_dashboard.py)."""
from __future__ import annotations

import json
import secrets
import urllib.error

import pytest

from tests.support import auth
from tests.support.dashboard import http, submit
from tests.support.worker import WorkerProcess

pytestmark = pytest.mark.e2e

ALICE = "alice-" + secrets.token_urlsafe(18)


def test_a_worker_serves_its_own_pages_only_when_asked(tmp_path):
    from tests.e2e.conftest import make_functions_dir

    tokens = auth.write_tokens(tmp_path, {"admin": auth.HARNESS_TOKEN, "alice": ALICE})
    w = WorkerProcess({"DASHBOARD_LISTEN": "127.0.0.1:0", "WORKER_AUTH_TOKENS_FILE": tokens},
                      functions_dir=make_functions_dir(tmp_path), executors=1)
    try:
        w.start()
        ev = w.wait_event("dashboard_listening")
        base = f"http://127.0.0.1:{ev['port']}"
        own = {"Content-Type": "application/json", "Origin": base}
        status, _h, body = http(base + "/api/login", method="POST", body={"token": "not-a-token-of-this-worker"},
                                headers=own)
        assert status == 401, body
        status, headers, body = http(base + "/api/login", method="POST", body={"token": ALICE}, headers=own)
        assert status == 200, body
        me = json.loads(body)
        assert me["identity"] == "alice" and me["admin"] is False       # the worker knows its tokens' names
        set_cookie = headers["Set-Cookie"]
        assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
        cookie = set_cookie.split(";", 1)[0]
        status, _h, body = http(base + "/api/fleet", cookie=cookie)
        assert status == 200
        assert [r["addr"] for r in json.loads(body)["workers"]] == [f"127.0.0.1:{w.port}"]
        status, _h, body = http(base + "/", cookie=cookie)
        assert status == 200 and b"/static/app.js" in body
    finally:
        w.stop()


def test_under_tls_the_pages_are_https_and_the_cookie_secure(tmp_path):
    import ssl

    from blockx.client import ClientTLS
    from tests.e2e.conftest import make_functions_dir
    from tests.support.certs import CertAuthority

    ca = CertAuthority(tmp_path / "pki")
    server = ca.issue("server")
    tokens = auth.write_tokens(tmp_path, {"admin": auth.HARNESS_TOKEN, "alice": ALICE})
    w = WorkerProcess({"DASHBOARD_LISTEN": "127.0.0.1:0", "WORKER_AUTH_TOKENS_FILE": tokens,
                       "WORKER_TLS_CERT": server.cert, "WORKER_TLS_KEY": server.key, "BLOCKX_TLS_CA": ca.cert},
                      functions_dir=make_functions_dir(tmp_path), executors=1, tls=ClientTLS(ca=ca.cert))
    try:
        w.start()
        ev = w.wait_event("dashboard_listening")
        assert ev["scheme"] == "https"
        base = f"https://127.0.0.1:{ev['port']}"
        trust = ssl.create_default_context(cafile=ca.cert)
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            http(f"http://127.0.0.1:{ev['port']}/")                    # no plain http beside it
        status, headers, body = http(base + "/api/login", method="POST", body={"token": ALICE}, ssl_context=trust,
                                     headers={"Content-Type": "application/json", "Origin": base})
        assert status == 200, body
        set_cookie = headers["Set-Cookie"]
        assert set_cookie.startswith("__Host-bx_session=")
        assert "Secure" in set_cookie and "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
        assert headers["Strict-Transport-Security"].startswith("max-age=")
        status, _h, body = http(base + "/api/fleet", cookie=set_cookie.split(";", 1)[0], ssl_context=trust)
        assert status == 200
        (row,) = json.loads(body)["workers"]
        assert row["addr"] == f"127.0.0.1:{w.port}" and row["error"] == ""      # reached its own TLS port
    finally:
        w.stop()


def test_the_pool_keeps_a_client_a_live_view_is_using(tmp_path):
    """A task page's live progress holds its worker's client for as long as the task
    runs; the idle sweep (which closes clients nobody asked for lately) must not
    close it under the watch."""
    import asyncio

    from blockx.dashboard.clients import ClientPool

    from tests.e2e.conftest import make_functions_dir

    tokens = auth.write_tokens(tmp_path, {"admin": auth.HARNESS_TOKEN, "alice": ALICE})
    w = WorkerProcess({"WORKER_AUTH_TOKENS_FILE": tokens}, functions_dir=make_functions_dir(tmp_path)).start()
    tid = "held-" + secrets.token_hex(4)
    submit(w, ALICE, tid, [("sleepy", [0.3, i]) for i in range(8)])         # about 1.2 s on 2 executors
    now = [0.0]

    async def go():
        pool = ClientPool(None, clock=lambda: now[0], idle_s=1.0)
        try:
            async with pool.hold(ALICE, f"127.0.0.1:{w.port}") as c:
                states = []
                async for u in c.watch([tid]):
                    states.append(u.state)
                    now[0] += 5.0                                 # long past the idle time, still watching
                    assert await pool.sweep({ALICE}) == 0
                return states
        finally:
            await pool.close()
    try:
        states = asyncio.run(go())
    finally:
        w.stop()
    assert states[-1] == "SUCCEEDED"


def test_the_pages_are_off_by_default(tmp_path):
    from tests.e2e.conftest import make_functions_dir

    w = WorkerProcess({}, functions_dir=make_functions_dir(tmp_path), executors=1).start()
    try:
        assert w.find_event("dashboard_listening") is None and w.find_event("dashboard_not_started") is None
    finally:
        w.stop()
