import asyncio

import orjson
import pytest

from blockx.app.config import WorkerFullConfig
from blockx.plugins.io import (DevStubBackend, IOBackend, IOBackendError, IOScopeClosed, IOScopeFactory,
                               TaskIOScope, UnknownIOBackend)


async def until(cond, what: str, timeout: float = 2.0) -> None:
    """Wait for `cond()` to hold, bounded (the tests below wait for states, never for time)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.001)


class CountingBackend:
    """Records each request; `gate` (when set) holds requests until released."""

    name = "counting"

    def __init__(self):
        self.calls = []
        self.gate: asyncio.Event | None = None
        self.active = 0
        self.max_active = 0
        self.fail_next = 0

    async def request(self, request_json, body):
        self.calls.append((request_json, body))
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.gate is not None:
                await self.gate.wait()
            if self.fail_next:
                self.fail_next -= 1
                raise IOBackendError("transient", retryable=True)
            return b'{"n":%d}' % len(self.calls), body
        finally:
            self.active -= 1

    async def close(self):
        pass


def req(obj):
    return orjson.dumps(obj)


# --- devstub -----------------------------------------------------------------------------


async def test_devstub_ops():
    be = DevStubBackend()
    assert isinstance(be, IOBackend)
    r = req({"op": "echo", "v": [1]})
    assert await be.request(r, b"\x00\x01") == (r, b"\x00\x01")
    assert await be.request(req({"op": "upper"}), b"abc\xff") == (b'{"op":"upper","bytes":4}', b"ABC\xff")
    assert await be.request(req({"op": "sleep", "ms": 1}), None) == (b'{"slept":1}', None)
    assert await be.request(req({"op": "count"}), None) == (b'{"count":4}', None)


@pytest.mark.parametrize("request_json,body,message,retryable", [
    (b'{"op":"fail","message":"nope","retryable":true}', None, "nope", True),
    (b'{"op":"fail"}', None, "failed as requested", False),
    (b'{"op":"upper"}', None, 'op "upper" needs a binary body', False),
    (b'{"op":"sleep","ms":-1}', None, 'sleep "ms" must be an integer', False),
    (b'{"op":"what"}', None, "unknown op 'what' (known: echo, upper, sleep, fail, count)", False),
    (b"[1]", None, "request must be a JSON object", False),
    (b"{bad", None, "request is not valid JSON", False),
])
async def test_devstub_errors(request_json, body, message, retryable):
    with pytest.raises(IOBackendError) as ei:
        await DevStubBackend().request(request_json, body)
    assert message in str(ei.value)
    assert ei.value.retryable is retryable
    assert ei.value.to_resume_error() == {"errorKind": "IO_ERROR", "errorMessage": str(ei.value),
                                          "retryable": retryable}


# --- cache --------------------------------------------------------------------------------


async def test_identical_requests_are_served_once_per_task():
    be = CountingBackend()
    scope = TaskIOScope("t1", {"counting": be})
    a = await scope.handle("counting", b'{"k":1}', None)
    b = await scope.handle("counting", b'{"k":1}', None)
    assert a == b == (b'{"n":1}', None)
    assert len(be.calls) == 1 and (scope.requests, scope.hits, scope.backend_requests) == (2, 1, 1)
    # the key is (backend, raw request bytes, body bytes)
    await scope.handle("counting", b'{"k": 1}', None)
    await scope.handle("counting", b'{"k":1}', b"body")
    await scope.handle("counting", b'{"k":1}', b"")
    assert len(be.calls) == 4
    assert await scope.handle("counting", bytearray(b'{"k":1}'), memoryview(b"body")) == (b'{"n":3}', b"body")
    assert len(be.calls) == 4


async def test_the_cache_is_per_task():
    be = CountingBackend()
    f = IOScopeFactory({"counting": be})
    s1, s2 = f.new_task_scope("a"), f.new_task_scope("b")
    await s1.handle("counting", b"{}")
    await s2.handle("counting", b"{}")
    assert len(be.calls) == 2


async def test_concurrent_identical_requests_join_the_first():
    be = CountingBackend()
    be.gate = asyncio.Event()
    scope = TaskIOScope("t", {"counting": be})
    waiters = [asyncio.ensure_future(scope.handle("counting", b'{"x":1}')) for _ in range(5)]
    await until(lambda: scope.requests == 5 and be.active == 1, "five waits, one at the backend")
    assert len(be.calls) == 1
    be.gate.set()
    results = await asyncio.gather(*waiters)
    assert results == [(b'{"n":1}', None)] * 5 and scope.hits == 4


async def test_failures_are_not_cached_so_a_retry_reaches_the_backend():
    be = CountingBackend()
    be.fail_next = 1
    scope = TaskIOScope("t", {"counting": be})
    with pytest.raises(IOBackendError, match="transient") as ei:
        await scope.handle("counting", b"{}")
    assert ei.value.retryable is True
    assert await scope.handle("counting", b"{}") == (b'{"n":2}', None)
    assert len(be.calls) == 2


async def test_results_beyond_the_cache_budget_are_returned_but_not_kept():
    be = CountingBackend()
    scope = TaskIOScope("t", {"counting": be}, max_cache_bytes=40)
    big = b"x" * 30
    assert await scope.handle("counting", b"{}", big) == (b'{"n":1}', big)
    assert await scope.handle("counting", b"{}", big) == (b'{"n":2}', big)
    assert scope.cached_bytes == 0
    await scope.handle("counting", b"{}")
    await scope.handle("counting", b"{}")
    assert len(be.calls) == 3 and scope.cached_bytes == len(b"{}") + len(b'{"n":3}')


# --- admission -------------------------------------------------------------------------------


async def test_backend_admission_is_shared_across_tasks():
    be = CountingBackend()
    be.gate = asyncio.Event()
    factory = IOScopeFactory({"counting": be}, {"counting": 2})
    scopes = [factory.new_task_scope(f"t{i}") for i in range(3)]
    pending = [asyncio.ensure_future(s.handle("counting", b'{"i":%d}' % i)) for i, s in enumerate(scopes)]
    pending.append(asyncio.ensure_future(scopes[0].handle("counting", b'{"other":1}')))
    await until(lambda: sum(s.backend_requests for s in scopes) == 4 and be.active == 2,
                "four backend requests, two admitted")
    assert len(be.calls) == 2  # two admitted, two queued on the semaphore
    be.gate.set()
    await asyncio.gather(*pending)
    assert be.max_active == 2 and len(be.calls) == 4


def test_factory_validates_concurrency():
    with pytest.raises(ValueError, match="concurrency must be > 0"):
        IOScopeFactory({"counting": CountingBackend()}, {"counting": 0})


# --- errors and lifecycle ----------------------------------------------------------------------


async def test_unknown_backend_is_a_clear_non_retryable_io_error():
    scope = TaskIOScope("t", {"devstub": DevStubBackend()})
    with pytest.raises(UnknownIOBackend) as ei:
        await scope.handle("blockdb", b"{}")
    assert str(ei.value) == "unknown IO backend 'blockdb' (this Worker serves: devstub)"
    assert ei.value.to_resume_error()["errorKind"] == "IO_ERROR"
    assert ei.value.retryable is False


async def test_backend_bugs_and_bad_returns_are_wrapped():
    class Broken:
        name = "broken"

        async def request(self, request_json, body):
            if request_json == b"1":
                raise KeyError("oops")
            return "not bytes", None

    scope = TaskIOScope("t", {"broken": Broken()})
    with pytest.raises(IOBackendError, match="broken: KeyError: 'oops'"):
        await scope.handle("broken", b"1")
    with pytest.raises(IOBackendError, match="expected \\(result_json bytes, body bytes \\| None\\)"):
        await scope.handle("broken", b"2")


async def test_request_timeout_is_retryable():
    scope = TaskIOScope("t", {"devstub": DevStubBackend()}, request_timeout_ms=10)
    with pytest.raises(IOBackendError, match="timed out after 10 ms") as ei:
        await scope.handle("devstub", b'{"op":"sleep","ms":1000}')
    assert ei.value.retryable is True


async def test_every_backend_request_has_a_timeout_from_the_config():
    # ioBackends.<name>.timeoutMs, and phaseIoTimeoutMs when it is 0.
    cfg = WorkerFullConfig()
    cfg.io_backends.devstub.enabled = True
    cfg.phase_io_timeout_ms = 30
    scope = IOScopeFactory.from_config(cfg).new_task_scope("t")
    with pytest.raises(IOBackendError, match="devstub: request timed out after 30 ms") as ei:
        await scope.handle("devstub", b'{"op":"sleep","ms":2000}')
    assert ei.value.retryable is True
    cfg.io_backends.devstub.timeout_ms = 20
    scope = IOScopeFactory.from_config(cfg).new_task_scope("t")
    with pytest.raises(IOBackendError, match="devstub: request timed out after 20 ms"):
        await scope.handle("devstub", b'{"op":"sleep","ms":2000}')
    assert await scope.handle("devstub", b'{"op":"sleep","ms":1}') == (b'{"slept":1}', None)


async def test_close_cancels_pending_requests_and_refuses_new_ones():
    be = CountingBackend()
    be.gate = asyncio.Event()
    scope = TaskIOScope("t", {"counting": be})
    pending = asyncio.ensure_future(scope.handle("counting", b"{}"))
    await until(lambda: be.active == 1, "the request at the backend")
    scope.close()
    with pytest.raises(IOScopeClosed, match="cancelled because the task finished"):
        await pending
    with pytest.raises(IOScopeClosed, match="IO scope is closed"):
        await scope.handle("counting", b"{}")
    assert scope.closed
    scope.close()  # idempotent


async def test_a_cancelled_waiter_does_not_cancel_the_shared_request():
    be = CountingBackend()
    be.gate = asyncio.Event()
    scope = TaskIOScope("t", {"counting": be})
    first = asyncio.ensure_future(scope.handle("counting", b"{}"))
    second = asyncio.ensure_future(scope.handle("counting", b"{}"))
    await until(lambda: scope.requests == 2 and be.active == 1, "both waits, one at the backend")
    first.cancel()
    await until(first.done, "the first waiter to be cancelled")
    be.gate.set()
    assert await second == (b'{"n":1}', None)
    assert first.cancelled()


def test_factory_from_the_default_config_serves_no_devstub():
    # The production default: the devstub backend only when configured (the dev profile does).
    assert "devstub" not in IOScopeFactory.from_config(WorkerFullConfig()).backends


async def test_factory_from_config_and_shutdown():
    cfg = WorkerFullConfig()
    cfg.io_backends.devstub.enabled = True
    cfg.io_backends.devstub.concurrency = 3
    f = IOScopeFactory.from_config(cfg)
    assert list(f.backends) == ["devstub"]
    s = f.new_task_scope("t")
    assert f.admission["devstub"]._value == 3
    assert await s.handle("devstub", b'{"op":"echo"}') == (b'{"op":"echo"}', None)
    assert f.live_scopes() == 1
    await f.close()
    assert s.closed and f.live_scopes() == 0
    cfg.io_backends.devstub.enabled = False
    assert IOScopeFactory.from_config(cfg).backends == {}


# --- handle_now: what needs no await is served without a Task ---------------------


class SyncBackend(CountingBackend):
    """Answers synchronously, except requests holding "await"."""

    name = "sync"

    def __init__(self):
        super().__init__()
        self.now_calls = []

    def request_now(self, request_json, body):
        if b"await" in request_json:
            return None
        self.now_calls.append(request_json)
        if b"fail" in request_json:
            raise IOBackendError("sync failure", retryable=True)
        if b"bug" in request_json:
            raise ZeroDivisionError("oops")
        if b"shape" in request_json:
            return [b"not a tuple"]
        return b'{"now":%d}' % len(self.now_calls), body


async def test_devstub_answers_every_op_but_sleep_synchronously():
    be = DevStubBackend()
    r = req({"op": "echo", "v": [1]})
    assert be.request_now(r, b"\x00") == (r, b"\x00")
    assert be.request_now(req({"op": "upper"}), b"ab") == (b'{"op":"upper","bytes":2}', b"AB")
    assert be.request_now(req({"op": "sleep", "ms": 1}), None) is None
    assert be.request_now(req({"op": "count"}), None) == (b'{"count":3}', None)   # sleep not served
    with pytest.raises(IOBackendError, match="nope"):
        be.request_now(req({"op": "fail", "message": "nope"}), None)
    with pytest.raises(IOBackendError, match="not valid JSON"):
        be.request_now(b"{bad", None)
    assert be.served == 5


async def test_handle_now_serves_a_synchronous_backend_and_stores_the_result():
    be = SyncBackend()
    scope = TaskIOScope("t", {"sync": be})
    tasks_before = asyncio.all_tasks()
    assert scope.handle_now("sync", b'{"a":1}') == (b'{"now":1}', None)
    assert scope.handle_now("sync", b'{"a":1}') == (b'{"now":1}', None)   # the task's cache answers
    assert asyncio.all_tasks() == tasks_before
    assert await scope.handle("sync", b'{"a":1}') == (b'{"now":1}', None)  # and so does handle()
    assert (scope.requests, scope.hits, scope.backend_requests) == (3, 2, 1)
    assert be.calls == [] and scope.cached_bytes == len(b'{"a":1}') + len(b'{"now":1}')
    assert scope.handle_now("sync", b'{"a":1}', bytearray(b"B")) == (b'{"now":2}', b"B")


async def test_handle_now_declines_what_must_await():
    be = SyncBackend()
    scope = TaskIOScope("t", {"sync": be, "counting": CountingBackend()})
    assert scope.handle_now("sync", b'{"await":1}') is None        # the backend says so
    assert scope.handle_now("counting", b"{}") is None              # no request_now at all
    assert (scope.requests, scope.backend_requests) == (0, 0)        # declining counts nothing
    be.gate = asyncio.Event()
    pending = asyncio.ensure_future(scope.handle("sync", b'{"await":1}'))
    await until(lambda: be.active == 1, "request in flight")
    assert scope.handle_now("sync", b'{"await":1}') is None        # in flight: join it by awaiting
    be.gate.set()
    assert await pending == (b'{"n":1}', None)
    assert scope.handle_now("sync", b'{"await":1}') == (b'{"n":1}', None)   # settled: served now


async def test_handle_now_respects_admission():
    be = SyncBackend()
    factory = IOScopeFactory({"sync": be}, {"sync": 1})
    scope = factory.new_task_scope("t")
    be.gate = asyncio.Event()
    pending = asyncio.ensure_future(scope.handle("sync", b'{"await":1}'))
    await until(lambda: be.active == 1, "the one admission slot taken")
    assert scope.handle_now("sync", b'{"b":1}') is None             # no room: it must queue
    be.gate.set()
    await pending
    assert scope.handle_now("sync", b'{"b":1}') == (b'{"now":1}', None)


async def test_handle_now_failures_are_not_cached_and_bugs_are_wrapped():
    be = SyncBackend()
    scope = TaskIOScope("t", {"sync": be})
    for _ in range(2):
        with pytest.raises(IOBackendError, match="sync failure") as ei:
            scope.handle_now("sync", b'{"fail":1}')
        assert ei.value.retryable is True
    assert len(be.now_calls) == 2
    with pytest.raises(IOBackendError, match="sync: ZeroDivisionError: oops"):
        scope.handle_now("sync", b'{"bug":1}')
    with pytest.raises(IOBackendError, match="expected \\(result_json bytes"):
        scope.handle_now("sync", b'{"shape":1}')
    with pytest.raises(UnknownIOBackend):
        scope.handle_now("nope", b"{}")
    scope.close()
    with pytest.raises(IOScopeClosed):
        scope.handle_now("sync", b'{"a":1}')
