"""rpc: JSON-RPC 2.0 over HTTP(S) against the Worker's named chain-node endpoints.

    sdk.io("rpc", {"endpoint": "main", "method": "eth_getBalance", "params": ["0x..", "latest"]})
      -> "0x3635c9adc5dea00000"            (the JSON-RPC `result`, as the node wrote it)

Theory of operation:
- The request names an endpoint (ioBackends.rpc.endpoints.<name>), never a URL:
  URLs, headers and secrets stay in the Worker's config.
- Admission: per endpoint at most `concurrency` HTTP requests are in flight;
  requests beyond wait in the endpoint's queue. All queues together hold at most
  `max_queue` requests; one more is refused at once (retryable), naming the
  setting, rather than growing memory behind a slow node.
- Batching: the requests that reach an endpoint's queue in one loop iteration are
  sent in the next one as one HTTP POST with a JSON array (at most `max_batch`
  each), the answers matched back by id. One request goes as a plain object.
- Each request has one deadline (the endpoint's timeoutMs) from entering the
  queue to its answer, retries included; past it the call gets a retryable error.
- Retries only where the node says "try again": HTTP 429 or 5xx, a refused,
  reset or dropped connection. Each retry goes to the next URL (failover); a URL
  already tried in this round is retried after a doubling backoff. The endpoint
  remembers the URL that last answered, so later requests start there.
- A JSON-RPC error object becomes RpcCallError (code, message, data): the call
  catches it as sdk.RpcError. A response that is not JSON-RPC, lacks an id of
  the batch or is larger than `max_response_bytes` is a clear, non-retryable
  IOBackendError for the requests it concerns. Nothing raises past the backend.
- One aiohttp ClientSession for the backend, on the Worker's event loop:
  its connection pool keeps HTTP/1.1 connections to each node alive.
The per-task IO cache (identical raw request bytes answered once per task) is
TaskIOScope's, in front of this backend."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping

import aiohttp
import orjson

from blockx.json_types import json_type
from blockx.plugins.io.request import request_object
from blockx.plugins.io.errors import IOBackendError, RpcCallError, TaskIOError
from blockx.plugins.io.rpc_endpoints import RpcEndpoint, url_label

NAME = "rpc"
_KEYS = ("endpoint", "method", "params")
_READ_CHUNK = 64 * 1024


class _Transient(Exception):
    """A failure the node marks as worth retrying (429, 5xx, connection)."""


class _Pending:
    __slots__ = ("method", "params", "future", "deadline")

    def __init__(self, method: bytes, params: bytes, future: asyncio.Future, deadline: float):
        self.method = method
        self.params = params
        self.future = future
        self.deadline = deadline


class RpcBackend:
    name = NAME

    def __init__(self, endpoints: Mapping[str, RpcEndpoint], *, max_queue: int = 1024, max_batch: int = 100,
                 max_response_bytes: int = 8 * 1024 * 1024, retries: int = 2, retry_backoff_ms: int = 50):
        if max_queue <= 0 or max_batch <= 0 or max_response_bytes <= 0 or retries < 0 or retry_backoff_ms < 0:
            raise ValueError("max_queue, max_batch and max_response_bytes must be > 0, retries and "
                             "retry_backoff_ms >= 0")
        self.max_queue = max_queue
        self.max_batch = max_batch
        self.max_response_bytes = max_response_bytes
        self.retries = retries
        self.retry_backoff_s = retry_backoff_ms / 1000
        self._lanes = {name: _Lane(self, ep) for name, ep in endpoints.items()}
        self.queued = 0          # requests waiting in any lane's queue
        self.posts = 0           # HTTP requests sent (attempts, retries included)
        self.sent = 0            # JSON-RPC requests sent in them
        self._session = None     # aiohttp.ClientSession, made on the running loop
        self._closed = False

    # --- the IOBackend contract ------------------------------------------------------

    async def request(self, request_json: bytes, body: bytes | None) -> tuple[bytes, bytes | None]:
        if body is not None:
            raise IOBackendError("rpc: a request takes no binary body")
        name, method, params = _parse(request_json)
        lane = self._lanes.get(name)
        if lane is None:
            known = ", ".join(sorted(self._lanes)) or "none"
            raise IOBackendError(f"rpc: unknown endpoint {name!r} (configured in ioBackends.rpc.endpoints: {known})")
        if self._closed:
            raise IOBackendError("rpc: the backend is closed (the Worker is shutting down)", retryable=True)
        if self.queued >= self.max_queue:
            raise IOBackendError(f"rpc: the queue is full: {self.queued} requests already wait for a connection "
                                 f"to an endpoint (ioBackends.rpc.maxQueue, RPC_IO_MAX_QUEUE)", retryable=True)
        loop = asyncio.get_running_loop()
        timeout_s = lane.endpoint.timeout_ms / 1000
        item = _Pending(method, params, loop.create_future(), loop.time() + timeout_s)
        lane.enqueue(item)
        try:
            return await asyncio.wait_for(asyncio.shield(item.future), timeout_s), None
        except asyncio.TimeoutError:
            item.future.cancel()
            raise IOBackendError(f"rpc: endpoint {name!r} gave no answer within {lane.endpoint.timeout_ms} ms "
                                 f"(ioBackends.rpc.endpoints.{name}.timeoutMs, or ioBackends.rpc.timeoutMs)",
                                 retryable=True) from None
        except asyncio.CancelledError:
            item.future.cancel()
            raise

    async def close(self) -> None:
        self._closed = True
        for lane in self._lanes.values():
            lane.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # --- used by the lanes -----------------------------------------------------------

    def session(self):
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30, enable_cleanup_closed=True),
                skip_auto_headers=("User-Agent",), auto_decompress=True, raise_for_status=False)
        return self._session


class _Lane:
    """One endpoint: its queue, its POSTs in flight and the URL to start from."""

    def __init__(self, backend: RpcBackend, endpoint: RpcEndpoint):
        self.backend = backend
        self.endpoint = endpoint
        self.queue: deque[_Pending] = deque()
        self.inflight = 0
        self.preferred = 0          # index of the URL that answered last
        self._flush_scheduled = False
        self._posts: set[asyncio.Task] = set()
        self._headers = {"Content-Type": "application/json", **dict(endpoint.headers)}

    def enqueue(self, item: _Pending) -> None:
        self.queue.append(item)
        self.backend.queued += 1
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        be = self.backend
        while self.queue and self.inflight < self.endpoint.concurrency:
            batch: list[_Pending] = []
            while self.queue and len(batch) < be.max_batch:
                item = self.queue.popleft()
                be.queued -= 1
                if not item.future.done():      # a timed-out or cancelled wait is dropped here
                    batch.append(item)
            if not batch:
                continue
            self.inflight += 1
            t = asyncio.get_running_loop().create_task(self._post(batch))
            self._posts.add(t)
            t.add_done_callback(self._post_done)

    def _post_done(self, t: asyncio.Task) -> None:
        self._posts.discard(t)
        self.inflight -= 1
        if self.queue and not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def close(self) -> None:
        while self.queue:
            item = self.queue.popleft()
            self.backend.queued -= 1
            if not item.future.done():
                item.future.set_exception(IOBackendError("rpc: the backend closed (the Worker is shutting down)",
                                                         retryable=True))
        for t in list(self._posts):
            t.cancel()

    # --- one batch -------------------------------------------------------------------

    async def _post(self, batch: list[_Pending]) -> None:
        try:
            answers = await self._send(batch)
        except TaskIOError as exc:
            _fail_all(batch, exc)
            return
        except asyncio.CancelledError:
            _fail_all(batch, IOBackendError("rpc: the request was cancelled (the Worker is shutting down)",
                                            retryable=True))
            raise
        except Exception as exc:   # noqa: BLE001 - never a raw exception into a call
            _fail_all(batch, IOBackendError(f"rpc: endpoint {self.endpoint.name!r}: {type(exc).__name__}: {exc}"))
            return
        for i, item in enumerate(batch):
            if not item.future.done():
                outcome = answers[i]
                if isinstance(outcome, TaskIOError):
                    item.future.set_exception(outcome)
                else:
                    item.future.set_result(outcome)

    async def _send(self, batch: list[_Pending]) -> list[bytes | TaskIOError]:
        """POST the batch, retrying transient failures on the next URL; the answers
        in batch order."""
        if len(batch) == 1:
            b = batch[0]
            payload = b'{"jsonrpc":"2.0","id":0,"method":%b,"params":%b}' % (b.method, b.params)
        else:
            payload = b"[" + b",".join(b'{"jsonrpc":"2.0","id":%d,"method":%b,"params":%b}' % (i, b.method, b.params)
                                       for i, b in enumerate(batch)) + b"]"
        loop = asyncio.get_running_loop()
        deadline = max(b.deadline for b in batch)
        urls = self.endpoint.urls
        start = self.preferred
        failures: list[str] = []
        backoff = self.backend.retry_backoff_s
        for attempt in range(self.backend.retries + 1):
            idx = (start + attempt) % len(urls)
            if attempt >= len(urls):          # this URL was tried already in this round: back off
                delay = min(backoff, deadline - loop.time())
                if delay > 0:
                    await asyncio.sleep(delay)
                backoff *= 2
            left = deadline - loop.time()
            if left <= 0:
                break
            url = urls[idx]
            try:
                raw = await self._attempt(url, payload, len(batch), left)
            except _Transient as exc:
                failures.append(f"{url_label(url)}: {exc}")
                continue
            self.preferred = idx
            return self._answers(batch, raw, url)
        tried = "; ".join(failures) or "no attempt fit in the deadline"
        raise IOBackendError(f"rpc: endpoint {self.endpoint.name!r} failed after {len(failures)} attempt(s) "
                             f"(ioBackends.rpc.retries={self.backend.retries}): {tried}", retryable=True)

    async def _attempt(self, url: str, payload: bytes, n: int, left_s: float) -> bytes:
        be = self.backend
        be.posts += 1
        be.sent += n
        cap = be.max_response_bytes
        try:
            # no redirects: the endpoint's headers (its token) go to its own URLs only
            async with be.session().post(url, data=payload, headers=self._headers, allow_redirects=False,
                                         timeout=aiohttp.ClientTimeout(total=left_s)) as resp:
                if resp.status == 429 or resp.status >= 500:
                    raise _Transient(f"HTTP {resp.status} {resp.reason or ''}".rstrip())
                if resp.content_length is not None and resp.content_length > cap:
                    raise self._too_large(url)
                chunks: list[bytes] = []
                size = 0
                while True:
                    chunk = await resp.content.read(_READ_CHUNK)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > cap:
                        raise self._too_large(url)
                    chunks.append(chunk)
                raw = b"".join(chunks)
                if resp.status != 200 and not raw.lstrip()[:1] in (b"{", b"["):
                    raise IOBackendError(f"rpc: endpoint {self.endpoint.name!r} ({url_label(url)}) answered "
                                         f"HTTP {resp.status} {resp.reason or ''}: {_snippet(raw)}".rstrip())
                return raw
        except asyncio.TimeoutError:
            raise IOBackendError(f"rpc: endpoint {self.endpoint.name!r} ({url_label(url)}) gave no answer within "
                                 f"{self.endpoint.timeout_ms} ms (ioBackends.rpc.endpoints.{self.endpoint.name}"
                                 ".timeoutMs, or ioBackends.rpc.timeoutMs)", retryable=True) from None
        except (aiohttp.ClientConnectionError, ConnectionError) as exc:
            # refused, reset, dropped mid-answer: the node may be back on the next try
            raise _Transient(_connection_reason(exc)) from None

    def _too_large(self, url: str) -> IOBackendError:
        return IOBackendError(f"rpc: endpoint {self.endpoint.name!r} ({url_label(url)}) answered more than "
                              f"{self.backend.max_response_bytes} bytes (ioBackends.rpc.maxResponseBytes, "
                              "RPC_IO_MAX_RESPONSE_BYTES); ask for less per request")

    def _answers(self, batch: list[_Pending], raw: bytes, url: str) -> list[bytes | TaskIOError]:
        where = f"endpoint {self.endpoint.name!r} ({url_label(url)})"
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise IOBackendError(f"rpc: {where} sent a malformed response (not JSON): {_snippet(raw)}") from None
        if len(batch) == 1:
            if isinstance(doc, list) and len(doc) == 1:
                doc = doc[0]
            if not isinstance(doc, dict):
                raise IOBackendError(f"rpc: {where} sent a malformed response: expected a JSON-RPC object, "
                                     f"got {json_type(doc)}")
            return [_answer(doc, where, batch[0].method)]
        if isinstance(doc, dict) and "error" in doc and doc.get("id") is None:
            # the node refused the batch as a whole
            return [_answer(doc, where, b.method) for b in batch]
        if not isinstance(doc, list):
            raise IOBackendError(f"rpc: {where} sent a malformed response to a batch: expected a JSON array, "
                                 f"got {json_type(doc)}")
        by_id: dict[int, dict] = {}
        for obj in doc:
            if isinstance(obj, dict) and type(obj.get("id")) is int:
                by_id[obj["id"]] = obj
        out: list[bytes | TaskIOError] = []
        for i, b in enumerate(batch):
            obj = by_id.get(i)
            if obj is None:
                out.append(IOBackendError(f"rpc: {where} sent a malformed response: the batch answer has no "
                                          f"entry for this request (id {i}, method {orjson.loads(b.method)})"))
            else:
                out.append(_answer(obj, where, b.method))
        return out


def _answer(obj: dict, where: str, method: bytes) -> bytes | TaskIOError:
    m = orjson.loads(method)
    if "error" in obj and obj["error"] is not None:
        err = obj["error"]
        code, msg = (err.get("code"), err.get("message")) if isinstance(err, dict) else (None, None)
        if type(code) is not int or not isinstance(msg, str):
            return IOBackendError(f"rpc: {where} sent a malformed response to {m}: the error object needs an "
                                  f"integer code and a string message, got {_snippet(orjson.dumps(err))}")
        return RpcCallError(f"rpc: {m} failed on {where}: JSON-RPC error {code}: {msg}",
                            code=code, rpc_message=msg, data=err.get("data"))
    if "result" not in obj:
        return IOBackendError(f"rpc: {where} sent a malformed response to {m}: neither result nor error in "
                              f"{_snippet(orjson.dumps(obj))}")
    return orjson.dumps(obj["result"])


def _fail_all(batch: list[_Pending], exc: TaskIOError) -> None:
    for item in batch:
        if not item.future.done():
            item.future.set_exception(exc)


def _parse(request_json: bytes) -> tuple[str, bytes, bytes]:
    """(endpoint name, method as a JSON string, params as JSON) of a call's request."""
    req = request_object("rpc", request_json, _KEYS)
    name = req.get("endpoint")
    if not isinstance(name, str) or not name:
        raise IOBackendError("rpc: endpoint must be the name of a configured endpoint (a non-empty string)")
    method = req.get("method")
    if not isinstance(method, str) or not method:
        raise IOBackendError("rpc: method must be a non-empty string, e.g. \"eth_blockNumber\"")
    params = req.get("params", [])
    if not isinstance(params, (list, dict)):
        raise IOBackendError(f"rpc: params must be an array or an object, got {json_type(params)}")
    return name, orjson.dumps(method), orjson.dumps(params)


def _connection_reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    low = text.lower()
    if "refused" in low:
        return f"connection refused ({text})"
    if "reset" in low:
        return f"connection reset ({text})"
    if "disconnect" in low:
        return f"the node closed the connection ({text})"
    return f"{type(exc).__name__}: {text}"


def _snippet(raw: bytes, n: int = 120) -> str:
    text = raw[:n].decode("utf-8", "replace")
    return repr(text + ("..." if len(raw) > n else ""))


def backend_from_config(section, environ: Mapping[str, str] | None = None) -> RpcBackend:
    """The backend of an ioBackends.rpc config section (already validated)."""
    import os

    from blockx.plugins.io.rpc_endpoints import parse_endpoints

    endpoints, problems = parse_endpoints(section.endpoints, timeout_ms=section.timeout_ms,
                                          concurrency=section.concurrency,
                                          environ=os.environ if environ is None else environ)
    if problems:
        raise ValueError("; ".join(problems))
    return RpcBackend(endpoints, max_queue=section.max_queue, max_batch=section.max_batch,
                      max_response_bytes=section.max_response_bytes, retries=section.retries,
                      retry_backoff_ms=section.retry_backoff_ms)
