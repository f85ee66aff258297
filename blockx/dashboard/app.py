"""The dashboard's web app: its routes, and the trust boundary every request crosses.

Every response carries the security headers (blockx.dashboard.headers); every
request's Host is checked (blockx.dashboard.guard, against DNS rebinding); every
/api/ route but login needs a live session (the HttpOnly, SameSite=Strict cookie;
Secure under TLS); every POST needs this dashboard's own Origin, and every POST
but login the session's CSRF token. The workers are called with the session's
own token, so a tenant sees and cancels only what the workers let that token
see; a worker address in a request must be one of the fleet's (no dialling an
address a browser chose).

Routes: / (the page), /static/* (its script, style and icon, from the package),
/api/login, /api/logout, /api/me, /api/fleet (and /api/fleet/events, server-sent
events once a second), /api/tasks, /api/task, /api/task/outputs,
/api/task/events (its progress, live), /api/task/timeline, /api/task/trace.json
(the Perfetto file), /api/task/cancel."""
from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from aiohttp import web

from blockx.client import BlockxError
from blockx.client.errors import PermissionDenied, Unauthenticated
from blockx.dashboard.clients import ClientPool
from blockx.dashboard.fleet import FleetSource, StatusPoller, heartbeat_row, totals
from blockx.dashboard.guard import CSRF_HEADER, host_ok, origin_ok
from blockx.dashboard.headers import security_headers
from blockx.dashboard.sessions import SessionStore, Session, token_fingerprint
from blockx.dashboard.timeline import lanes_of
from blockx.dashboard.views import PAGE_OUTPUTS, PHASES, STATES, progress_json, result_json, summary_json

log = logging.getLogger("blockx.dashboard")

STATIC_FILES = {"app.js": "text/javascript", "app.css": "text/css", "icon.svg": "image/svg+xml"}
MAX_BODY_BYTES = 16 * 1024
MAX_TOKEN_CHARS = 512
MAX_STREAMS_PER_SESSION = 8
MAX_STREAMS = 256
EVENT_INTERVAL_S = 1.0
RPC_TIMEOUT_S = 10.0
LOGIN_RATE_PER_S = 5.0
LOGIN_BURST = 20
SWEEP_INTERVAL_S = 10.0
# The request's session, as the guard found it (a typed key where aiohttp has them).
SESSION_KEY: Any = web.RequestKey("session", Session) if hasattr(web, "RequestKey") else "session"
_TASK_ID = re.compile(r"[\x21-\x7e]{1,256}")
_TOKEN = re.compile(r"[\x21-\x7e]{1,512}")
_HTTP_OF_CODE = {"NOT_FOUND": 404, "PERMISSION_DENIED": 403, "UNAUTHENTICATED": 401, "INVALID_ARGUMENT": 400,
                 "FAILED_PRECONDITION": 409, "RESOURCE_EXHAUSTED": 429, "UNAVAILABLE": 503,
                 "DEADLINE_EXCEEDED": 504}


@dataclass
class DashboardConfig:
    tls: bool = False                                   # served over https
    allowed_hosts: frozenset[str] | None = frozenset()  # None: any Host (see guard.allowed_host_names)
    # The identity name of a token when the dashboard can tell (a worker serving its own
    # pages knows its tokens file); None: "admin" or "tenant <fingerprint>".
    name_of: Callable[[str], str | None] | None = None
    session_capacity: int = 1000
    session_idle_s: float = 30 * 60.0
    session_max_age_s: float = 12 * 3600.0
    title: str = "BlockX fleet"


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _from_blockx(exc: BlockxError) -> web.Response:
    return _error(_HTTP_OF_CODE.get(exc.code.name, 502), f"{exc.code.name}: {exc.message}")


class _LoginBucket:
    """Login attempts, rate-limited for the whole dashboard (each costs an RPC)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._level = float(LOGIN_BURST)
        self._at = clock()

    def take(self) -> bool:
        now = self._clock()
        self._level = min(float(LOGIN_BURST), self._level + (now - self._at) * LOGIN_RATE_PER_S)
        self._at = now
        if self._level < 1.0:
            return False
        self._level -= 1.0
        return True


@dataclass
class Dashboard:
    source: FleetSource
    pool: ClientPool
    config: DashboardConfig = field(default_factory=DashboardConfig)
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        c = self.config
        self.sessions = SessionStore(capacity=c.session_capacity, idle_s=c.session_idle_s,
                                     max_age_s=c.session_max_age_s)
        self.pollers: dict[str, StatusPoller] = {}      # admin token -> its poller
        self.streams: dict[int, int] = {}               # id(session) -> open event streams
        self.login_bucket = _LoginBucket(self.clock)
        self.cookie = "__Host-bx_session" if c.tls else "bx_session"
        self._static = {name: resources.files("blockx.dashboard").joinpath("static", name).read_bytes()
                        for name in (*STATIC_FILES, "index.html")}
        self._sweeper: asyncio.Task | None = None

    # ---- lifecycle -----------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard], client_max_size=MAX_BODY_BYTES)
        app.on_response_prepare.append(self._headers)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        r = app.router
        r.add_get("/", self.page)
        r.add_get("/static/{name}", self.static)
        r.add_get("/favicon.ico", self.icon)
        r.add_post("/api/login", self.login)
        r.add_post("/api/logout", self.logout)
        r.add_get("/api/me", self.me)
        r.add_get("/api/fleet", self.fleet)
        r.add_get("/api/fleet/events", self.fleet_events)
        r.add_get("/api/tasks", self.tasks)
        r.add_get("/api/task", self.task)
        r.add_get("/api/task/outputs", self.task_outputs)
        r.add_get("/api/task/events", self.task_events)
        r.add_get("/api/task/timeline", self.task_timeline)
        r.add_get("/api/task/trace.json", self.task_trace_file)
        r.add_post("/api/task/cancel", self.task_cancel)
        return app

    async def _start(self, _app) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop())

    async def _stop(self, _app) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for p in self.pollers.values():
            await p.stop()
        await self.pool.close()

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            try:
                await self.sweep()
            except Exception:  # noqa: BLE001 - the next sweep tries again
                log.exception("dashboard sweep failed")

    async def sweep(self) -> None:
        """Expired sessions go, then the connections and pollers of tokens no session holds."""
        self.sessions.expire(self.clock())
        live = self.sessions.tokens()
        for token in [t for t in self.pollers if t not in live]:
            await self.pollers.pop(token).stop()
        await self.pool.sweep(live)

    # ---- the boundary --------------------------------------------------------------

    async def _headers(self, request: web.Request, response: web.StreamResponse) -> None:
        response.headers.update(security_headers(request.path, tls=self.config.tls))

    @web.middleware
    async def _guard(self, request: web.Request, handler):
        if not host_ok(request.headers.get("Host"), self.config.allowed_hosts):
            return _error(421, "this dashboard does not answer for that host name (see --allowed-host)")
        if request.method == "POST":
            if not origin_ok(request.headers.get("Origin"), self._scheme(), request.headers.get("Host")):
                return _error(403, "a POST must come from this dashboard's own page (Origin missing or foreign)")
            if request.content_type != "application/json":
                return _error(415, "a POST carries JSON (Content-Type: application/json)")
        if request.path.startswith("/api/") and request.path != "/api/login":
            session = self.session_of(request)
            if session is None and request.path == "/api/me" and request.method == "GET":
                return web.json_response({"logged_in": False})   # the page asks before login: no error
            if session is None:
                return _error(401, "not logged in (or the session expired): log in with a token")
            if request.method == "POST" and not session.csrf_ok(request.headers.get(CSRF_HEADER)):
                return _error(403, f"the {CSRF_HEADER} header is missing or not this session's")
            request[SESSION_KEY] = session
        return await handler(request)

    def _scheme(self) -> str:
        return "https" if self.config.tls else "http"

    def session_of(self, request: web.Request) -> Session | None:
        return self.sessions.get(request.cookies.get(self.cookie), self.clock())

    def _worker(self, request: web.Request, value: str | None = None) -> str:
        addr = value if value is not None else request.query.get("worker", "")
        if not addr or not self.source.known(addr):
            raise web.HTTPNotFound(text=json.dumps({"error": f"no worker {addr!r} in this fleet"}),
                                   content_type="application/json")
        return addr

    @staticmethod
    def _task_id(value: Any) -> str:
        if not isinstance(value, str) or not _TASK_ID.fullmatch(value):
            raise web.HTTPBadRequest(text=json.dumps({"error": "a task id is 1 to 256 printable characters"}),
                                     content_type="application/json")
        return value

    # ---- pages ---------------------------------------------------------------------

    async def page(self, _request: web.Request) -> web.Response:
        return web.Response(body=self._static["index.html"], content_type="text/html", charset="utf-8")

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC_FILES:
            raise web.HTTPNotFound()
        return web.Response(body=self._static[name], content_type=STATIC_FILES[name],
                            headers={"Cache-Control": "no-cache"})

    async def icon(self, _request: web.Request) -> web.Response:
        return web.Response(body=self._static["icon.svg"], content_type="image/svg+xml")

    # ---- login ---------------------------------------------------------------------

    async def login(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            return _error(400, "the login body is JSON: {\"token\": \"...\"}")
        token = body.get("token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not _TOKEN.fullmatch(token.strip()):
            return _error(400, f"a token is 1 to {MAX_TOKEN_CHARS} printable characters without spaces")
        token = token.strip()
        if not self.login_bucket.take():
            return _error(429, "too many login attempts: wait a second and try again")
        admin, problem = await self._check_token(token)
        if admin is None:
            return _error(401 if problem.startswith("UNAUTHENTICATED") else 503, problem)
        name = self.config.name_of(token) if self.config.name_of is not None else None
        identity = name or ("admin" if admin else f"tenant {token_fingerprint(token)}")
        old = request.cookies.get(self.cookie)
        self.sessions.drop(old)                         # a fresh id at every login (no fixation)
        sid, s = self.sessions.create(token, admin=admin, identity=identity, now=self.clock())
        resp = web.json_response({"identity": s.identity, "admin": s.admin, "csrf": s.csrf})
        resp.set_cookie(self.cookie, sid, httponly=True, samesite="Strict", secure=self.config.tls, path="/",
                        max_age=int(self.config.session_max_age_s))
        log.info("dashboard login", extra={"identity": identity})
        return resp

    async def _check_token(self, token: str) -> tuple[bool | None, str]:
        """(admin?, "") when a worker accepts the token; (None, why) when none does."""
        addrs = self.source.addresses()
        if not addrs:
            return None, "UNAVAILABLE: no worker in the fleet to check the token with"
        last = ""
        for addr in addrs:
            try:
                c = await self.pool.get(token, addr)
                try:
                    await c.status(timeout_s=RPC_TIMEOUT_S)
                    return True, ""
                except PermissionDenied:
                    return False, ""
            except Unauthenticated as exc:
                return None, f"UNAUTHENTICATED: {exc.message}"
            except BlockxError as exc:
                last = f"{exc.code.name}: {exc.message}"
        return None, last or "UNAVAILABLE: no worker answered"

    async def logout(self, request: web.Request) -> web.Response:
        self.sessions.drop(request.cookies.get(self.cookie))
        resp = web.json_response({"ok": True})
        resp.del_cookie(self.cookie, path="/")
        return resp

    async def me(self, request: web.Request) -> web.Response:
        s: Session = request[SESSION_KEY]
        return web.json_response({"logged_in": True, "identity": s.identity, "admin": s.admin, "csrf": s.csrf,
                                  "states": STATES, "phases": PHASES})

    # ---- the fleet -----------------------------------------------------------------

    def _poller(self, s: Session) -> StatusPoller | None:
        if not s.admin:
            return None
        p = self.pollers.get(s.token)
        if p is None:
            p = self.pollers[s.token] = StatusPoller(self.source, self.pool, s.token, clock=self.clock)
        p.ask()
        return p

    def snapshot(self, s: Session) -> dict[str, Any]:
        p = self._poller(s)
        rows = p.rows() if p is not None else [heartbeat_row(w) for w in self.source.workers()]
        return {"workers": rows, "totals": totals(rows), "admin": s.admin, "etcd": self.source.etcd_note(),
                "status_note": "" if s.admin else "executor, phase and rate columns need an admin token "
                                                  "(GetWorkerStatus shows the whole worker)",
                "reads": p.reads if p is not None else 0}

    async def fleet(self, request: web.Request) -> web.Response:
        s: Session = request[SESSION_KEY]
        p = self._poller(s)
        if p is not None and p.reads == 0:
            await p.wait_read(POLL_FIRST_WAIT_S)
        return web.json_response(self.snapshot(s))

    async def fleet_events(self, request: web.Request) -> web.StreamResponse:
        s: Session = request[SESSION_KEY]
        return await self._stream(request, s, self._fleet_frames(s, request))

    async def _fleet_frames(self, s: Session, request: web.Request):
        while True:
            p = self._poller(s)
            yield self.snapshot(s)
            if p is not None:
                await p.wait_read(EVENT_INTERVAL_S)
            else:
                await asyncio.sleep(EVENT_INTERVAL_S)

    async def _stream(self, request: web.Request, s: Session, frames) -> web.StreamResponse:
        """Server-sent events of ``frames`` (dicts) while the session lives."""
        key = id(s)
        if self.streams.get(key, 0) >= MAX_STREAMS_PER_SESSION or sum(self.streams.values()) >= MAX_STREAMS:
            return _error(429, "too many live views open: close a tab")
        self.streams[key] = self.streams.get(key, 0) + 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"})
        try:
            await resp.prepare(request)
            async for frame in frames:
                if self.sessions.get(request.cookies.get(self.cookie), self.clock()) is not s:
                    await resp.write(b"event: logout\ndata: {}\n\n")
                    break
                await resp.write(b"data: " + json.dumps(frame, separators=(",", ":")).encode() + b"\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.streams[key] -= 1
            if not self.streams[key]:
                del self.streams[key]
            await frames.aclose()         # a closed tab ends its watch and lets go of its client now
        return resp

    # ---- tasks ---------------------------------------------------------------------

    async def tasks(self, request: web.Request) -> web.Response:
        s: Session = request[SESSION_KEY]
        q = request.query
        states = [x for x in q.get("state", "").upper().split(",") if x]
        phases = [x for x in q.get("phase", "").upper().split(",") if x]
        bad = [x for x in states if x not in STATES] + [x for x in phases if x not in PHASES]
        if bad:
            return _error(400, f"unknown state or phase {bad[0]!r}: states {', '.join(STATES)}; "
                               f"phases {', '.join(PHASES)}")
        owner, instance = q.get("owner", ""), q.get("instance", "")
        try:
            page_size = min(200, max(1, int(q.get("page_size", "50"))))
        except ValueError:
            return _error(400, "page_size is a number (1 to 200)")
        addrs = [self._worker(request)] if q.get("worker") else self.source.addresses()
        cursor = _read_cursor(q.get("page", ""), addrs)
        if cursor is None:
            return _error(400, "page is not a page token this dashboard gave")
        results = await asyncio.gather(*(self._list_one(s, a, tok, states, phases, instance, owner, page_size)
                                         for a, tok in cursor.items()))
        rows, nxt, errors = [], {}, {}
        for addr, (tasks, token, err) in zip(cursor, results):
            rows += [{**t, "worker": addr} for t in tasks]
            if token:
                nxt[addr] = token
            if err:
                errors[addr] = err
        rows.sort(key=lambda t: (-t["created_at_ms"], t["task_id"]))
        return web.json_response({"tasks": rows, "next_page": _write_cursor(nxt), "errors": errors})

    async def _list_one(self, s: Session, addr: str, token: str, states, phases, instance: str, owner: str,
                        page_size: int) -> tuple[list, str, str]:
        """One worker's next page of matching tasks (owner filtered here: ListTasks has no
        owner filter, so up to 10 of its pages are read to fill one)."""
        out: list = []
        try:
            c = await self.pool.get(s.token, addr)
            for _ in range(10):
                r = await c.list_tasks(states=states, phases=phases, instance_id=instance, page_size=page_size,
                                       page_token=token, timeout_s=RPC_TIMEOUT_S)
                out += [summary_json(t) for t in r.tasks if not owner or t.owner == owner]
                token = r.next_page_token
                if not token or len(out) >= page_size:
                    break
            return out, token, ""
        except BlockxError as exc:
            return out, "", f"{exc.code.name}: {exc.message}"

    async def task(self, request: web.Request) -> web.Response:
        s: Session = request[SESSION_KEY]
        addr, tid = self._worker(request), self._task_id(request.query.get("id"))
        try:
            c = await self.pool.get(s.token, addr)
            r = await c.result_page(tid, 0, PAGE_OUTPUTS)
        except BlockxError as exc:
            return _from_blockx(exc)
        return web.json_response(result_json(r.task_id, r.state, r.result if r.HasField("result") else None, addr))

    async def task_outputs(self, request: web.Request) -> web.Response:
        s: Session = request[SESSION_KEY]
        addr, tid = self._worker(request), self._task_id(request.query.get("id"))
        try:
            offset = max(0, int(request.query.get("offset", "0")))
        except ValueError:
            return _error(400, "offset is a number")
        try:
            c = await self.pool.get(s.token, addr)
            r = await c.result_page(tid, offset, PAGE_OUTPUTS)
        except BlockxError as exc:
            return _from_blockx(exc)
        return web.json_response(result_json(r.task_id, r.state, r.result if r.HasField("result") else None, addr))

    async def task_events(self, request: web.Request) -> web.StreamResponse:
        s: Session = request[SESSION_KEY]
        addr, tid = self._worker(request), self._task_id(request.query.get("id"))
        return await self._stream(request, s, self._task_frames(s.token, addr, tid))

    async def _task_frames(self, token: str, addr: str, tid: str):
        try:
            async with self.pool.hold(token, addr) as c:
                async for u in c.watch([tid]):
                    frame: dict[str, Any] = {"state": u.state, "terminal": u.is_terminal,
                                             "progress": progress_json(u.progress) if u.progress else None}
                    yield frame
                    if u.is_terminal:
                        break
        except BlockxError as exc:
            yield {"error": f"{exc.code.name}: {exc.message}"}

    async def task_timeline(self, request: web.Request) -> web.Response:
        s: Session = request[SESSION_KEY]
        addr, tid = self._worker(request), self._task_id(request.query.get("id"))
        try:
            c = await self.pool.get(s.token, addr)
            tr = await c.trace(tid, timeout_s=RPC_TIMEOUT_S)
            lanes = lanes_of(tr.chrome_trace())
        except BlockxError as exc:
            return _from_blockx(exc)
        except ValueError as exc:
            return _error(502, f"the worker's trace could not be read: {exc}")
        lanes.update({"task_id": tr.task_id, "state": tr.state, "complete": tr.complete, "sampled": tr.sampled,
                      "sample_every": tr.sample_every, "events_recorded": tr.events_recorded,
                      "events_dropped": tr.events_dropped})
        return web.json_response(lanes)

    async def task_trace_file(self, request: web.Request) -> web.Response:
        s: Session = request[SESSION_KEY]
        addr, tid = self._worker(request), self._task_id(request.query.get("id"))
        try:
            c = await self.pool.get(s.token, addr)
            tr = await c.trace(tid, timeout_s=RPC_TIMEOUT_S)
        except BlockxError as exc:
            return _from_blockx(exc)
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", tid)[:100]
        return web.Response(body=tr.chrome_trace_json, content_type="application/json",
                            headers={"Content-Disposition": f'attachment; filename="trace-{safe}.json"'})

    async def task_cancel(self, request: web.Request) -> web.Response:
        s: Session = request[SESSION_KEY]
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            return _error(400, "the body is JSON: {\"worker\": ..., \"task_id\": ..., \"reason\": ...}")
        if not isinstance(body, dict):
            return _error(400, "the body is a JSON object")
        addr, tid = self._worker(request, str(body.get("worker", ""))), self._task_id(body.get("task_id"))
        reason = body.get("reason", "")
        if not isinstance(reason, str) or len(reason) > 1024:
            return _error(400, "a reason is text of at most 1024 characters")
        try:
            c = await self.pool.get(s.token, addr)
            out = await c.cancel(tid, reason or f"cancelled from the dashboard by {s.identity}")
        except BlockxError as exc:
            return _from_blockx(exc)
        return web.json_response({"task_id": out.task_id, "state": out.state, "failure_code": out.failure_code,
                                  "cancelled": bool(getattr(out.raw, "cancelled", False))})


POLL_FIRST_WAIT_S = 3.0


def _read_cursor(text: str, addrs: list[str]) -> dict[str, str] | None:
    """The page token of /api/tasks: {worker: its ListTasks page token}; "" is every
    worker's first page. None when it is not one of ours (or names another worker)."""
    if not text:
        return {a: "" for a in addrs}
    try:
        raw = json.loads(base64.urlsafe_b64decode(text.encode() + b"=" * (-len(text) % 4)))
    except ValueError:
        return None
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in raw.items()):
        return None
    if any(k not in addrs for k in raw):
        return None
    return raw


def _write_cursor(c: dict[str, str]) -> str:
    if not c:
        return ""
    return base64.urlsafe_b64encode(json.dumps(c, sort_keys=True).encode()).decode().rstrip("=")
