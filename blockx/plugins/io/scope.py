"""TaskIOScope: how one task's calls reach the IO backends.

Theory of operation:
- Every IO wait of a task's calls goes through its scope. Identical requests
  (same backend, same raw request bytes, same body bytes) within the task are
  served once: the first starts the backend request, later ones join it while it is
  in flight (singleflight) and get the stored result afterwards. Raw bytes are the
  key on purpose: the executor encodes requests canonically, and hashing bytes costs
  nothing next to re-parsing JSON. Failures are not cached, so a retried call
  really retries.
- Backend admission is shared by all tasks of the Worker: one semaphore per
  backend bounds the requests in flight against that system, whatever the task.
- The cache lives and dies with the task (`close()` at convergence): it is a
  consistency device ("one task sees one answer") as much as a speed-up, and it is
  never shared across tasks. Results larger than the remaining `max_cache_bytes`
  are still returned to every waiter but not retained.
- `close()` cancels pending backend requests; their waiters get IOScopeClosed.
- `handle_now()` serves what needs no await (a stored result; a backend's
  synchronous `request_now` while its admission has room) without a Task or
  Future, storing the result itself in the cache; None means await `handle()`.
- Errors reach the call as TaskIOError subclasses carrying errorKind/retryable for
  the ResumeCall; an unexpected exception from a backend is wrapped, never raised raw."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping
from functools import partial
from typing import Any

from blockx.plugins.io.backend import IOBackend
from blockx.plugins.io.errors import IOBackendError, IOScopeClosed, TaskIOError, UnknownIOBackend

DEFAULT_MAX_CACHE_BYTES = 64 * 1024 * 1024

_Result = tuple[bytes, bytes | None]


class TaskIOScope:
    __slots__ = ("task_id", "_backends", "_admission", "_cache", "_closed", "_max_cache_bytes",
                 "_cache_bytes", "_timeout_s", "requests", "hits", "backend_requests", "__weakref__")

    def __init__(self, task_id: str, backends: Mapping[str, IOBackend],
                 admission: Mapping[str, asyncio.Semaphore] | None = None, *,
                 max_cache_bytes: int = DEFAULT_MAX_CACHE_BYTES,
                 request_timeout_ms: int | Mapping[str, int] = 0):
        self.task_id = task_id
        self._backends = backends
        self._admission = admission or {}
        # a request in flight (its Future), then its outcome
        self._cache: dict[tuple[str, bytes, bytes | None], Any] = {}     # a Future in flight, or a _Result
        self._closed = False
        self._max_cache_bytes = max_cache_bytes
        self._cache_bytes = 0
        # One timeout for every backend, or one per backend name (ioBackends.<name>.timeoutMs).
        self._timeout_s = _timeouts_s(request_timeout_ms, backends)
        self.requests = 0
        self.hits = 0
        self.backend_requests = 0

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def cached_bytes(self) -> int:
        return self._cache_bytes

    async def handle(self, backend: str, request_json: bytes, body: bytes | None = None) -> _Result:
        """Serve one IO wait: (result JSON bytes, optional binary body)."""
        if self._closed:
            raise IOScopeClosed(f"task {self.task_id}: IO scope is closed (the task has finished)")
        if type(request_json) is not bytes:
            request_json = bytes(request_json)
        if body is not None and type(body) is not bytes:
            body = bytes(body)
        self.requests += 1
        key = (backend, request_json, body)
        fut = self._cache.get(key)
        if fut is not None:
            self.hits += 1
            if type(fut) is tuple:          # stored by handle_now
                return fut
            if fut.done():
                return self._outcome(fut)
        else:
            be = self._backends.get(backend)
            if be is None:
                known = ", ".join(sorted(self._backends)) or "none"
                raise UnknownIOBackend(f"unknown IO backend {backend!r} (this Worker serves: {known})")
            self.backend_requests += 1
            fut = asyncio.get_running_loop().create_task(self._fetch(be, backend, request_json, body))
            self._cache[key] = fut
            fut.add_done_callback(partial(self._settled, key, len(request_json) + len(body or b"")))
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            if fut.cancelled() and self._closed:
                raise IOScopeClosed(f"task {self.task_id}: IO request to {backend!r} was cancelled "
                                    "because the task finished") from None
            raise

    def handle_now(self, backend: str, request_json: bytes, body: bytes | None = None) -> _Result | None:
        """handle() when the answer needs no await: a stored result, or a backend
        whose `request_now` answers synchronously while its admission has room
        (taking and giving back a slot at once is the same as not waiting).
        None: nothing was done, await handle(). Raises as handle() does."""
        if self._closed:
            raise IOScopeClosed(f"task {self.task_id}: IO scope is closed (the task has finished)")
        if type(request_json) is not bytes:
            request_json = bytes(request_json)
        if body is not None and type(body) is not bytes:
            body = bytes(body)
        key = (backend, request_json, body)
        got = self._cache.get(key)
        if got is not None:
            if type(got) is not tuple:
                if not got.done():
                    return None             # in flight: join it by awaiting
                got = self._outcome(got)    # (raises a failure, as handle() would)
            self.requests += 1
            self.hits += 1
            return got
        be = self._backends.get(backend)
        if be is None:
            self.requests += 1
            known = ", ".join(sorted(self._backends)) or "none"
            raise UnknownIOBackend(f"unknown IO backend {backend!r} (this Worker serves: {known})")
        now = getattr(be, "request_now", None)
        if now is None:
            return None
        sem = self._admission.get(backend)
        if sem is not None and sem.locked():
            return None
        try:
            out = now(request_json, body)
        except TaskIOError:
            self.requests += 1
            self.backend_requests += 1
            raise
        except Exception as exc:  # a backend bug must not escape as a raw exception
            self.requests += 1
            self.backend_requests += 1
            raise IOBackendError(f"{backend}: {type(exc).__name__}: {exc}") from exc
        if out is None:
            return None
        self.requests += 1
        self.backend_requests += 1
        out = _checked(backend, out)
        size = len(request_json) + len(body or b"") + len(out[0]) + len(out[1] or b"")
        if self._cache_bytes + size <= self._max_cache_bytes:
            self._cache[key] = out
            self._cache_bytes += size
        return out

    def close(self) -> None:
        """End the scope: cancel pending requests and drop the cache."""
        if self._closed:
            return
        self._closed = True
        pending = [f for f in self._cache.values() if type(f) is not tuple and not f.done()]
        self._cache.clear()
        self._cache_bytes = 0
        for f in pending:
            f.cancel()

    # --- internals -------------------------------------------------------------

    def _outcome(self, fut: asyncio.Future) -> _Result:
        if fut.cancelled():
            raise IOScopeClosed(f"task {self.task_id}: IO scope is closed")
        exc = fut.exception()
        if exc is not None:
            raise exc
        return fut.result()

    async def _fetch(self, be: IOBackend, backend: str, request_json: bytes, body: bytes | None) -> _Result:
        sem = self._admission.get(backend)
        timeout_s = self._timeout_s.get(backend)
        try:
            if sem is None:
                out = await self._call(be, request_json, body, timeout_s)
            else:
                async with sem:
                    out = await self._call(be, request_json, body, timeout_s)
        except TaskIOError:
            raise
        except asyncio.TimeoutError:
            raise IOBackendError(f"{backend}: request timed out after {round((timeout_s or 0) * 1000)} ms",
                                 retryable=True) from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a backend bug must not escape as a raw exception
            raise IOBackendError(f"{backend}: {type(exc).__name__}: {exc}") from exc
        return _checked(backend, out)

    @staticmethod
    async def _call(be: IOBackend, request_json: bytes, body: bytes | None, timeout_s: float | None):
        if timeout_s is None:
            return await be.request(request_json, body)
        return await asyncio.wait_for(be.request(request_json, body), timeout_s)

    def _settled(self, key, key_bytes: int, fut: asyncio.Future) -> None:
        if self._cache.get(key) is not fut:
            return  # closed, or already replaced
        if fut.cancelled() or fut.exception() is not None:
            del self._cache[key]  # failures are not cached: a retry must reach the backend
            return
        result, rbody = fut.result()
        size = key_bytes + len(result) + len(rbody or b"")
        if self._cache_bytes + size > self._max_cache_bytes:
            del self._cache[key]
            return
        self._cache_bytes += size


def _checked(backend: str, out) -> _Result:
    if (not isinstance(out, tuple) or len(out) != 2 or not isinstance(out[0], (bytes, bytearray))
            or not (out[1] is None or isinstance(out[1], (bytes, bytearray)))):
        raise IOBackendError(f"{backend}: backend returned {type(out).__name__}, "
                             "expected (result_json bytes, body bytes | None)")
    result, rbody = out
    if type(result) is bytes and (rbody is None or type(rbody) is bytes):
        return out
    return (bytes(result), None if rbody is None else bytes(rbody))


def _timeouts_s(timeout_ms: int | Mapping[str, int], backends: Mapping[str, IOBackend]) -> dict[str, float]:
    """Backend name -> request timeout in seconds; a backend without one (0) is absent."""
    if isinstance(timeout_ms, Mapping):
        return {name: ms / 1000 for name, ms in timeout_ms.items() if ms > 0}
    return {name: timeout_ms / 1000 for name in backends} if timeout_ms > 0 else {}


class IOScopeFactory:
    """Owns the backends and their shared admission; makes one scope per task."""

    def __init__(self, backends: Mapping[str, IOBackend], concurrency: Mapping[str, int] | None = None, *,
                 max_cache_bytes: int = DEFAULT_MAX_CACHE_BYTES,
                 request_timeout_ms: int | Mapping[str, int] = 0):
        self.backends = dict(backends)
        self._concurrency = dict(concurrency or {})
        for name, n in self._concurrency.items():
            if n <= 0:
                raise ValueError(f"IO backend {name!r}: concurrency must be > 0, got {n}")
        self._admission: dict[str, asyncio.Semaphore] | None = None
        self._max_cache_bytes = max_cache_bytes
        self._request_timeout_ms = request_timeout_ms
        self._scopes: weakref.WeakSet[TaskIOScope] = weakref.WeakSet()

    @classmethod
    def from_config(cls, cfg, data=None) -> IOScopeFactory:
        """The backends a WorkerFullConfig enables: devstub, sql when the
        Worker has a data plane (admission per source lives in the sql backend),
        rpc when ioBackends.rpc.endpoints names any (admission per endpoint in it).
        Every backend request has a timeout: ioBackends.<name>.timeoutMs
        (devstub: 0 = phaseIoTimeoutMs)."""
        from blockx.plugins.io.devstub import DevStubBackend

        backends: dict[str, IOBackend] = {}
        concurrency: dict[str, int] = {}
        timeouts: dict[str, int] = {}
        dev = cfg.io_backends.devstub
        if dev.enabled:
            backends["devstub"] = DevStubBackend()
            concurrency["devstub"] = dev.concurrency
            timeouts["devstub"] = dev.timeout_ms or cfg.phase_io_timeout_ms
        sql = cfg.io_backends.sql
        if sql.enabled and data is not None:
            from blockx.plugins.io.sql import SqlBackend

            backends["sql"] = SqlBackend(data, concurrency=sql.concurrency, max_rows=sql.max_rows,
                                         timeout_ms=sql.timeout_ms, max_result_bytes=sql.max_result_bytes)
            timeouts["sql"] = sql.timeout_ms
        rpc = cfg.io_backends.rpc
        if rpc.endpoints:   # on only when endpoints are configured; the backend owns admission and timeouts
            from blockx.plugins.io.rpc import backend_from_config

            backends["rpc"] = backend_from_config(rpc)
        return cls(backends, concurrency, request_timeout_ms=timeouts)

    @property
    def admission(self) -> dict[str, asyncio.Semaphore]:
        if self._admission is None:
            self._admission = {name: asyncio.Semaphore(n) for name, n in self._concurrency.items()
                               if name in self.backends}
        return self._admission

    def new_task_scope(self, task_id: str) -> TaskIOScope:
        scope = TaskIOScope(task_id, self.backends, self.admission,
                            max_cache_bytes=self._max_cache_bytes, request_timeout_ms=self._request_timeout_ms)
        self._scopes.add(scope)
        return scope

    def live_scopes(self) -> int:
        return sum(1 for s in self._scopes if not s.closed)

    def close_all(self) -> None:
        for s in list(self._scopes):
            s.close()

    async def aclose(self) -> None:
        """Close every scope, then every backend (shutdown, after the executors)."""
        self.close_all()
        for be in self.backends.values():
            close = getattr(be, "close", None)
            if close is not None:
                await close()

    close = aclose  # the shutdown sequence calls factory.close()
