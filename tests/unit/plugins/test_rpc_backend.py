"""The rpc IO backend against real HTTP servers on loopback (tests.support.
scripted_rpc_server): batching per loop iteration, admission, retries and
failover, timeouts, malformed and oversized answers, JSON-RPC errors, and the
per-task cache in front of it."""
import asyncio
import time

import orjson
import pytest

from blockx.plugins.io.errors import IOBackendError, RpcCallError
from blockx.plugins.io.rpc import RpcBackend
from blockx.plugins.io.rpc_endpoints import RpcEndpoint
from blockx.plugins.io.scope import IOScopeFactory
from tests.support.etcd import free_port
from tests.support.scripted_rpc_server import ScriptedRpcServer


@pytest.fixture
def srv():
    with ScriptedRpcServer() as s:
        yield s


@pytest.fixture
def srv2():
    with ScriptedRpcServer() as s:
        yield s


def backend(*urls, timeout_ms=3000, concurrency=8, headers=(), **kw):
    kw.setdefault("retry_backoff_ms", 10)
    return RpcBackend({"main": RpcEndpoint("main", tuple(urls), tuple(headers), timeout_ms, concurrency)}, **kw)


def req(method="eth_blockNumber", params=(), endpoint="main"):
    return orjson.dumps({"endpoint": endpoint, "method": method, "params": list(params)})


async def call(be, method="eth_blockNumber", params=()):
    out, body = await be.request(req(method, params), None)
    assert body is None
    return orjson.loads(out)


async def test_requests_of_one_loop_iteration_go_as_one_batch_matched_by_id(srv):
    be = backend(srv.url)
    try:
        outs = await asyncio.gather(*(call(be, "eth_getBalance", [f"0x{i}", "latest"]) for i in range(5)))
        # the server answers a batch in reverse order: matching is by id, not position
        assert outs == [{"m": "eth_getBalance", "p": [f"0x{i}", "latest"]} for i in range(5)]
        assert srv.posts == 1 and isinstance(srv.bodies[0], list) and len(srv.bodies[0]) == 5
        assert sorted(r["id"] for r in srv.bodies[0]) == [0, 1, 2, 3, 4]
        assert all(r["jsonrpc"] == "2.0" for r in srv.bodies[0])
        assert await call(be, "net_version") == {"m": "net_version", "p": []}
        assert srv.posts == 2 and isinstance(srv.bodies[1], dict)      # one request: a plain object
    finally:
        await be.close()


async def test_max_batch_splits_a_burst(srv):
    be = backend(srv.url, max_batch=2)
    try:
        await asyncio.gather(*(call(be, "m", [i]) for i in range(5)))
        assert srv.posts == 3 and sorted(len(b) if isinstance(b, list) else 1 for b in srv.bodies) == [1, 2, 2]
    finally:
        await be.close()


async def test_concurrency_cap_queues_and_batches_what_waits(srv):
    srv.mode = "sleep:0.3"
    be = backend(srv.url, concurrency=1)
    try:
        first = asyncio.ensure_future(call(be, "a"))
        await asyncio.sleep(0.1)                    # the first POST is in flight
        rest = [asyncio.ensure_future(call(be, "b", [i])) for i in range(3)]
        await asyncio.sleep(0.05)
        assert be.queued == 3 and srv.posts == 1    # held back by the cap, not sent
        await asyncio.gather(first, *rest)
        assert srv.posts == 2 and len(srv.bodies[1]) == 3
    finally:
        await be.close()


async def test_a_full_queue_refuses_at_once_naming_the_setting(srv):
    srv.mode = "sleep:0.3"
    be = backend(srv.url, concurrency=1, max_queue=2)
    try:
        first = asyncio.ensure_future(call(be, "a"))
        await asyncio.sleep(0.1)
        waiting = [asyncio.ensure_future(call(be, "b", [i])) for i in range(2)]
        await asyncio.sleep(0)
        t0 = time.monotonic()
        with pytest.raises(IOBackendError) as ei:
            await call(be, "c")
        assert time.monotonic() - t0 < 0.05
        assert ei.value.retryable and "queue is full: 2 requests" in ei.value.message
        assert "ioBackends.rpc.maxQueue, RPC_IO_MAX_QUEUE" in ei.value.message
        await asyncio.gather(first, *waiting)
        assert be.queued == 0
    finally:
        await be.close()


@pytest.mark.parametrize("status", [503, 500, 429])
async def test_transient_http_statuses_are_retried_with_backoff(srv, status):
    srv.fail_first, srv.fail_mode = 2, f"status:{status}"
    be = backend(srv.url, retries=2, retry_backoff_ms=50)
    try:
        t0 = time.monotonic()
        assert await call(be) == {"m": "eth_blockNumber", "p": []}
        assert srv.posts == 3
        assert time.monotonic() - t0 >= 0.05 + 0.1 - 0.01      # backoff 50 ms, then 100 ms (one URL)
    finally:
        await be.close()


async def test_retries_run_out_with_every_attempt_named(srv):
    srv.mode = "status:503"
    be = backend(srv.url, retries=1)
    try:
        with pytest.raises(IOBackendError) as ei:
            await call(be)
        assert srv.posts == 2 and ei.value.retryable
        assert "failed after 2 attempt(s) (ioBackends.rpc.retries=1)" in ei.value.message
        assert f"http://127.0.0.1:{srv.port}: HTTP 503" in ei.value.message
    finally:
        await be.close()


async def test_a_client_error_status_is_not_retried(srv):
    srv.mode = "status:403"
    be = backend(srv.url, retries=3)
    try:
        with pytest.raises(IOBackendError, match="answered HTTP 403 Forbidden: 'node says no'") as ei:
            await call(be)
        assert srv.posts == 1 and not ei.value.retryable
    finally:
        await be.close()


async def test_failover_from_a_dead_url_and_the_endpoint_remembers_the_live_one(srv):
    dead = f"http://127.0.0.1:{free_port()}"
    be = backend(dead, srv.url, retries=1)
    try:
        assert await call(be) == {"m": "eth_blockNumber", "p": []}
        assert srv.posts == 1 and be.posts == 2      # refused on the dead URL, then the live one
        await call(be, "again")
        assert srv.posts == 2 and be.posts == 3      # straight to the URL that answered last
    finally:
        await be.close()


async def test_a_dropped_connection_fails_over_to_the_next_url(srv, srv2):
    srv.mode = "drop"
    be = backend(srv.url, srv2.url, retries=1)
    try:
        assert await call(be) == {"m": "eth_blockNumber", "p": []}
        assert (srv.posts, srv2.posts) == (1, 1)
    finally:
        await be.close()


async def test_every_url_refusing_is_a_clear_retryable_error():
    be = backend(f"http://127.0.0.1:{free_port()}", retries=2, retry_backoff_ms=1)
    try:
        with pytest.raises(IOBackendError) as ei:
            await call(be)
        assert ei.value.retryable and "failed after 3 attempt(s)" in ei.value.message
        assert "connection refused" in ei.value.message.lower() or "connect" in ei.value.message.lower()
    finally:
        await be.close()


async def test_a_slow_node_past_the_timeout(srv):
    srv.mode = "sleep:3"
    be = backend(srv.url, timeout_ms=300)
    try:
        t0 = time.monotonic()
        with pytest.raises(IOBackendError) as ei:
            await call(be)
        assert 0.25 < time.monotonic() - t0 < 1.5
        assert ei.value.retryable and "gave no answer within 300 ms" in ei.value.message
        assert "ioBackends.rpc.endpoints.main.timeoutMs" in ei.value.message
        srv.mode = "ok"
        assert await call(be) == {"m": "eth_blockNumber", "p": []}      # the backend keeps serving
    finally:
        await be.close()


@pytest.mark.parametrize("mode,needle", [
    ("malformed", "sent a malformed response (not JSON): '<html>502 bad gateway</html>'"),
    ("notrpc", "sent a malformed response to eth_blockNumber: neither result nor error"),
])
async def test_malformed_answers_are_clear_call_errors(srv, mode, needle):
    srv.mode = mode
    be = backend(srv.url, retries=2)
    try:
        with pytest.raises(IOBackendError) as ei:
            await call(be)
        assert needle in ei.value.message and not ei.value.retryable
        assert srv.posts == 1          # a malformed answer is not what a retry fixes
    finally:
        await be.close()


async def test_a_batch_answer_missing_an_id_fails_only_that_request(srv):
    srv.mode = "missing"
    be = backend(srv.url)
    try:
        outs = await asyncio.gather(*(call(be, "m", [i]) for i in range(3)), return_exceptions=True)
        assert outs[:2] == [{"m": "m", "p": [0]}, {"m": "m", "p": [1]}]
        assert isinstance(outs[2], IOBackendError)
        assert "the batch answer has no entry for this request (id 2, method m)" in outs[2].message
    finally:
        await be.close()


async def test_a_json_rpc_error_is_typed_with_code_message_and_data(srv):
    srv.mode = "error:-32601"
    be = backend(srv.url)
    try:
        with pytest.raises(RpcCallError) as ei:
            await call(be, "eth_nope")
        e = ei.value
        assert (e.code, e.rpc_message, e.data, e.retryable) == (-32601, "Method not found", "eth_nope", False)
        assert e.to_resume_error() == {
            "errorKind": "RPC_ERROR", "retryable": False, "errorMessage": e.message,
            "rpcError": {"code": -32601, "message": "Method not found", "data": "eth_nope"}}
        assert "eth_nope failed on endpoint 'main'" in e.message and "JSON-RPC error -32601" in e.message
        assert srv.posts == 1
    finally:
        await be.close()


async def test_the_response_size_cap(srv):
    srv.mode = "big:5000"
    be = backend(srv.url, max_response_bytes=4096)
    try:
        with pytest.raises(IOBackendError) as ei:
            await call(be)
        assert "answered more than 4096 bytes (ioBackends.rpc.maxResponseBytes, RPC_IO_MAX_RESPONSE_BYTES)" \
            in ei.value.message
        srv.mode = "big:1000"
        assert len(await call(be)) == 1000
    finally:
        await be.close()


async def test_configured_headers_are_sent(srv):
    be = backend(srv.url, headers=(("Authorization", "Bearer abc"),))
    try:
        await call(be)
        assert srv.headers[0]["Authorization"] == "Bearer abc"
        assert srv.headers[0]["Content-Type"] == "application/json"
    finally:
        await be.close()


@pytest.mark.parametrize("request_json,needle", [
    (req(endpoint="nope"), "unknown endpoint 'nope' (configured in ioBackends.rpc.endpoints: main)"),
    (b'{"endpoint": "main"}', "method must be a non-empty string"),
    (b'{"endpoint": "main", "method": "x", "params": 5}', "params must be an array or an object, got number"),
    (b'{"endpoint": "main", "method": "x", "url": "http://evil"}', "unknown request key(s) 'url'"),
    (b'[1]', "request must be a JSON object, got array"),
])
async def test_bad_requests(srv, request_json, needle):
    be = backend(srv.url)
    try:
        with pytest.raises(IOBackendError, match=None) as ei:
            await be.request(request_json, None)
        assert needle in ei.value.message and srv.posts == 0
    finally:
        await be.close()


async def test_the_task_cache_answers_a_repeated_read_once_per_task(srv):
    be = backend(srv.url)
    factory = IOScopeFactory({"rpc": be})
    try:
        a = factory.new_task_scope("t1")
        r = req("eth_getBalance", ["0xabc", "latest"])
        outs = await asyncio.gather(*(a.handle("rpc", r) for _ in range(4)))
        outs.append(await a.handle("rpc", r))
        assert len(set(outs)) == 1 and srv.requests == 1
        assert (a.requests, a.hits, a.backend_requests) == (5, 4, 1)
        b = factory.new_task_scope("t2")           # another task reads the node itself
        await b.handle("rpc", r)
        assert srv.requests == 2
        srv.mode = "error:-32000"                  # errors are not cached: a retry reaches the node
        for _ in range(2):
            with pytest.raises(RpcCallError):
                await a.handle("rpc", req("eth_call"))
        assert srv.requests == 4
    finally:
        await factory.aclose()
