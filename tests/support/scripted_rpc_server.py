"""A real HTTP server on a loopback port whose JSON-RPC answers a test scripts:
the failures a chain node shows (slow, 5xx, 429, a dropped connection, a
malformed or oversized body, a JSON-RPC error) on demand, and counts of what it
received. It runs in a thread with its own event loop, so a Worker process or an
in-process backend reach it through real sockets.

    with ScriptedRpcServer() as srv:
        srv.mode = "ok"                 # answer every request: result = {"m": method, "p": params}
        srv.mode = "status:503"         # every POST: HTTP 503
        srv.fail_first = 2              # the first 2 POSTs get `fail_mode`, later ones `mode`
        srv.url, srv.posts, srv.requests, srv.bodies
Modes: ok, sleep:<seconds>, status:<code>, drop (close the connection without an
answer), malformed (a non-JSON body), notrpc (JSON without result or error),
missing (a batch answer without its last entry), big:<bytes>, error:<code>."""

from __future__ import annotations

import asyncio
import json
import threading

from aiohttp import web

from tests.support.etcd import free_port

__all__ = ["ScriptedRpcServer"]


class ScriptedRpcServer:
    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.fail_first = 0
        self.fail_mode = "status:503"
        self.port = 0
        self.posts = 0
        self.requests = 0
        self.bodies: list[object] = []
        self.headers: list[dict[str, str]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ScriptedRpcServer:
        ready = threading.Event()
        self.port = free_port()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            app = web.Application()
            app.router.add_post("/", self._handle)
            app.router.add_post("/{tail:.*}", self._handle)
            self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
            self._loop.run_until_complete(self._runner.setup())
            self._loop.run_until_complete(web.TCPSite(self._runner, "127.0.0.1", self.port).start())
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())
            self._loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the scripted JSON-RPC server did not start within 10 s")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> ScriptedRpcServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.posts += 1
        raw = await request.read()
        doc = json.loads(raw)
        self.bodies.append(doc)
        self.headers.append(dict(request.headers))
        batch = doc if isinstance(doc, list) else [doc]
        self.requests += len(batch)
        mode = self.fail_mode if self.posts <= self.fail_first else self.mode
        kind, _, arg = mode.partition(":")
        if kind == "sleep":
            await asyncio.sleep(float(arg))
        elif kind == "status":
            return web.Response(status=int(arg), text="node says no")
        elif kind == "drop":
            request.transport.close()
            raise asyncio.CancelledError
        elif kind == "malformed":
            return web.Response(body=b"<html>502 bad gateway</html>", content_type="application/json")
        elif kind == "big":
            return web.Response(body=json.dumps({"jsonrpc": "2.0", "id": batch[0]["id"],
                                                 "result": "x" * int(arg)}).encode(),
                                content_type="application/json")
        answers = []
        for r in batch:
            if kind == "error":
                answers.append({"jsonrpc": "2.0", "id": r["id"],
                                "error": {"code": int(arg), "message": "Method not found", "data": r["method"]}})
            elif kind == "notrpc":
                answers.append({"jsonrpc": "2.0", "id": r["id"]})
            else:
                answers.append({"jsonrpc": "2.0", "id": r["id"], "result": {"m": r["method"], "p": r["params"]}})
        if kind == "missing":
            answers = answers[:-1]
        body = answers if isinstance(doc, list) else answers[0]
        return web.Response(body=json.dumps(list(reversed(body)) if isinstance(body, list) else body).encode(),
                            content_type="application/json")
