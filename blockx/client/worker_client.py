"""WorkerClient: one Worker over one TaskSession stream.

Requests made in one loop iteration go out as one SessionRequestBatch (a writer
task takes everything queued when it wakes), and the Worker answers in batches
too, so a burst of submits costs a few gRPC messages, not one RPC each. A reader
task routes each event: a reply (its request_id) to the request waiting for it,
a task update to whoever listens to that task (a ``submit(wait=True)`` or a
``watch``). When the stream ends or breaks, every waiting caller gets
``SessionBroken`` at once, and so does every later request: nothing hangs.

Results come in pages (blockx.client.pages): ``submit`` and ``result`` return
the outputs the terminal message carried (``TaskOutcome.outputs_truncated`` when
more are on the Worker) unless called with ``all_outputs=True``; ``outputs``
iterates every output of a task, page by page.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from collections.abc import AsyncIterator, Iterable
from typing import Any, cast

import grpc

from blockx.client.bounded import as_completed_bounded
from blockx.credentials import TOKEN_FROM_ENV, auth_metadata, resolve_token
from blockx.client.errors import (InvalidArgument, NoSlot, SessionBroken, TracingOff, Unavailable, error_for,
                                  from_rpc_error)
from blockx.client.outcome import SlotLease, TaskOutcome, TaskUpdate, decode_output, state_name
from blockx.client.pages import all_pages, pages_after
from blockx.client.reach import DEFAULT_CONNECT_TIMEOUT_S, wait_ready
from blockx.client.tasks import build_task
from blockx.tls.client_tls import TLS_FROM_ENV, ClientTLS, aio_channel
from blockx.client.trace import TaskTrace
from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc

_TERMINAL = (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED)
SESSION_ACCEPT_WAIT_S = 2.0
DEFAULT_CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 30_000),
)


class _Reply:
    """The reply (or, for a watch, the N replies) to one request."""
    __slots__ = ("future", "expect", "events")

    def __init__(self, future: asyncio.Future, expect: int) -> None:
        self.future = future
        self.expect = expect
        self.events: list = []

    def event(self, ev: pb.SessionEvent) -> bool:
        """True when this request is fully answered."""
        if ev.WhichOneof("event") == "error":
            if not self.future.done():
                self.future.set_exception(error_for(ev.error.code, ev.error.message))
            return True
        self.events.append(ev)
        if len(self.events) >= self.expect:
            if not self.future.done():
                self.future.set_result(self.events)
            return True
        return False

    def fail(self, err: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(err)


class _TerminalWaiter:
    """Resolves with a task's terminal pb.TaskUpdate."""
    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future) -> None:
        self.future = future

    def update(self, upd: pb.TaskUpdate) -> None:
        if upd.is_terminal and not self.future.done():
            self.future.set_result(upd)

    def fail(self, err: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(err)


class _UpdateQueue:
    """Feeds a ``watch`` iterator."""
    __slots__ = ("queue",)

    def __init__(self) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()

    def update(self, upd: pb.TaskUpdate) -> None:
        self.queue.put_nowait(upd)

    def fail(self, err: BaseException) -> None:
        self.queue.put_nowait(err)


class WorkerClient:
    """``async with WorkerClient("127.0.0.1:8081") as c: outcome = await c.submit(calls=[("add", [1, 2])])``"""

    def __init__(self, addr: str, *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 channel_options: Iterable[tuple[str, Any]] = DEFAULT_CHANNEL_OPTIONS,
                 fail_fast: bool = True, tls: ClientTLS | None | object = TLS_FROM_ENV,
                 token: str | None | object = TOKEN_FROM_ENV) -> None:
        self.addr = addr
        # TLS_FROM_ENV: BLOCKX_TLS_CA / _CERT / _KEY when set, else plaintext (blockx.tls.client_tls).
        self.tls: ClientTLS | None = ClientTLS.from_env() if tls is TLS_FROM_ENV else cast("ClientTLS | None", tls)
        # TOKEN_FROM_ENV: BLOCKX_TOKEN, else this host's <STATE_DIR>/auth-token for an address on this
        # host (blockx.credentials).
        self._metadata = auth_metadata(resolve_token(token, addr=addr))
        # How long the address may take to answer; a refused or failed connection
        # raises at once whatever it is (blockx.client.reach). ``fail_fast`` is how
        # every client connects now: the parameter stays for callers that pass it.
        self._connect_timeout_s = connect_timeout_s
        self._channel_options = list(channel_options)
        self._channel: grpc.aio.Channel | None = None
        self._call: Any = None            # the TaskSession stream call, once opened
        self._ids = itertools.count(1)
        self._pending: dict[int, _Reply] = {}
        self._listeners: dict[str, list] = {}
        self._outgoing: list = []
        self._wake: asyncio.Future | None = None
        self._tasks: list[asyncio.Task] = []
        self._broken: SessionBroken | None = None

    # ---- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> "WorkerClient":
        await self.connect()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def connect(self) -> None:
        """Open the channel and the session. An Unreachable (an Unavailable) at once
        when nothing listens at the address, or when it does not answer within
        ``connect_timeout_s``: the message says which (blockx.client.reach)."""
        self._channel = aio_channel(self.addr, self.tls, self._channel_options)
        try:
            await wait_ready(self._channel, self.addr, self._connect_timeout_s, tls=self.tls is not None)
        except Unavailable:
            await self._channel.close()
            raise
        self._call = call = pb_grpc.WorkerServiceStub(self._channel).TaskSession(metadata=self._metadata)
        # The Worker answers a session it accepts with its initial metadata, and one it
        # refuses (credentials, shutdown) with its status: wait for either before writing,
        # so the refusal is what the caller gets (grpc.aio lets a write that fails after
        # the status replace it with INTERNAL). A Worker too old to send it answers only
        # the first request: after SESSION_ACCEPT_WAIT_S the session goes ahead anyway.
        try:
            # not bounded by connect_timeout_s: the address answered, and a loaded
            # Worker may take longer than a connection does to accept a session
            await asyncio.wait_for(asyncio.shield(call.initial_metadata()), SESSION_ACCEPT_WAIT_S)
        except asyncio.TimeoutError:
            pass
        except grpc.RpcError:
            pass                                  # the status below says why
        if call.done():
            code = await call.code()
            details = await call.details()
            call.cancel()
            await asyncio.sleep(0)                # let the call's own preparation task finish
            await self._channel.close()
            raise error_for(code, f"the worker at {self.addr} refused the session: {details}")
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._read_loop()), loop.create_task(self._write_loop())]

    async def close(self) -> None:
        """End the session (tasks keep running on the Worker) and the channel."""
        self._break(SessionBroken(f"the session with {self.addr} was closed by the client",
                                  grpc.StatusCode.CANCELLED))
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - closing either way
                pass
        self._tasks = []
        if self._call is not None:
            self._call.cancel()
        if self._channel is not None:
            await self._channel.close()

    @property
    def broken(self) -> SessionBroken | None:
        """Why the session ended, once it has."""
        return self._broken

    # ---- the public operations ----------------------------------------------------------

    async def submit(self, calls=None, *, task: pb.Task | None = None, task_id: str | None = None,
                     timeout_ms: int = 0, wait: bool = True, slot_id: str = "",
                     all_outputs: bool = False) -> TaskOutcome:
        """Submit a task (a callList of ``(function_id, args)`` pairs, or a full ``pb.Task``).
        With ``wait`` return its terminal outcome; otherwise the state SubmitTask returned.
        The outcome holds the outputs the terminal message carried (its first page);
        with ``all_outputs`` every one of them (the other pages are fetched)."""
        t = build_task(calls=calls, task=task, task_id=task_id, timeout_ms=timeout_ms)
        out = await self.submit_built(t, wait=wait, slot_id=slot_id)
        return await self.complete(out) if all_outputs else out

    async def submit_built(self, t: pb.Task, *, wait: bool = True, slot_id: str = "") -> TaskOutcome:
        """``submit`` of a pb.Task that already has its task id, sent as it is (not
        copied): what a Cluster uses after building the task once. The first page."""
        tid = t.task_id
        req = pb.SessionRequest(submit=pb.SubmitTaskRequest(task=t, slot_id=slot_id), follow=wait)
        if not wait:
            resp = (await self._request(req))[0].submitted
            return TaskOutcome.from_pb(tid, resp.state, resp.result if resp.HasField("result") else None,
                                       self.addr, resp)
        waiter = _TerminalWaiter(asyncio.get_running_loop().create_future())
        self._listen(tid, waiter)
        try:
            resp = (await self._request(req))[0].submitted
            if resp.state in _TERMINAL:      # an idempotent resubmit of a finished task
                return TaskOutcome.from_pb(tid, resp.state, resp.result, self.addr, resp)
            upd = await waiter.future
        finally:
            self._unlisten(tid, waiter)
            if waiter.future.done() and not waiter.future.cancelled():
                waiter.future.exception()       # failed with the session: the reply's error is raised
        return TaskOutcome.from_pb(tid, upd.state, upd.result, self.addr, upd)

    async def map(self, function_id: str, args_iterable: Iterable, *, concurrency: int = 64,
                  timeout_ms: int = 0, no_slot_retry_s: float = 30.0) -> AsyncIterator[TaskOutcome]:
        """One one-call task per element (a list / tuple is the argument list, anything else
        the single argument), ``concurrency`` at once; yields outcomes as tasks finish.
        A NoSlot answer is retried while other tasks of the map free slots."""
        loop = asyncio.get_running_loop()

        async def one(args) -> TaskOutcome:
            deadline = loop.time() + no_slot_retry_s
            delay = 0.001
            while True:
                try:
                    return await self.submit([(function_id, args)], timeout_ms=timeout_ms)
                except NoSlot:
                    if loop.time() + delay > deadline:
                        raise
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 0.05)

        async with contextlib.aclosing(as_completed_bounded(args_iterable, one, concurrency)) as outcomes:
            async for outcome in outcomes:
                yield outcome

    async def watch(self, task_ids: Iterable[str]) -> AsyncIterator[TaskUpdate]:
        """Each task's current state, then every change, until all are terminal.
        While a task's calls run, updates in the same state carry new progress
        (``TaskUpdate.progress``, at most every 250 ms); the terminal update carries
        the final counts. NotFound (before anything is yielded) if any id is unknown."""
        ids = list(dict.fromkeys(task_ids))
        listener = _UpdateQueue()
        for tid in ids:
            self._listen(tid, listener)
        try:
            await self._request(pb.SessionRequest(watch=pb.WatchTasksRequest(task_ids=ids)), expect=len(ids) or 1)
            remaining = set(ids)
            last: dict[str, tuple] = {}
            while remaining:
                item = await listener.queue.get()
                if isinstance(item, BaseException):
                    raise item
                tid = item.task_id
                seen = (item.state, item.progress.SerializeToString() if item.HasField("progress") else None)
                if tid not in remaining or last.get(tid) == seen:
                    continue
                last[tid] = seen
                if item.is_terminal:
                    remaining.discard(tid)
                yield TaskUpdate.from_pb(item, self.addr)
        finally:
            for tid in ids:
                self._unlisten(tid, listener)

    async def status(self, timeout_s: float = 10.0) -> pb.WorkerStatus:
        """GetWorkerStatus: slots, tasks by phase, executors, cumulative counters
        (the raw pb.WorkerStatus; rates are deltas of its counters between reads)."""
        if self._channel is None:
            raise SessionBroken("the client is not connected: use `async with WorkerClient(addr)` "
                                "or await connect()", grpc.StatusCode.FAILED_PRECONDITION)
        try:
            return await pb_grpc.WorkerServiceStub(self._channel).GetWorkerStatus(
                pb.GetWorkerStatusRequest(), timeout=timeout_s, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    async def request_slot(self, task_id: str, ttl_ms: int = 0) -> SlotLease:
        """Lease a slot for ``task_id`` (idempotent by task id)."""
        ev = (await self._request(pb.SessionRequest(
            request_slot=pb.RequestTaskSlotRequest(task_id=task_id, ttl_ms=ttl_ms))))[0]
        r = ev.slot
        return SlotLease(r.task_id, r.slot_id, state_name(r.state), self.addr, r)

    async def result(self, task_id: str, *, all_outputs: bool = False) -> TaskOutcome:
        """The task's current state, with its result once terminal: the outputs of its
        first page (``outputs_truncated`` when more follow), or with ``all_outputs``
        every one of them."""
        r = (await self._request(pb.SessionRequest(get_result=pb.GetTaskResultRequest(task_id=task_id))))[0].result
        out = TaskOutcome.from_pb(r.task_id, r.state, r.result if r.HasField("result") else None, self.addr, r)
        return await self.complete(out) if all_outputs else out

    # ---- results in pages ------------------------------------------------------------

    async def complete(self, outcome: TaskOutcome) -> TaskOutcome:
        """A copy of ``outcome`` (as ``submit`` or ``result`` returned it) with every
        output: the pages after the one it holds are fetched from this worker and
        appended, in order. ``outcome`` itself when it is not truncated."""
        raw = outcome.raw
        first = raw.result if raw is not None and raw.HasField("result") else None
        if first is None or not first.outputs_truncated:
            return outcome
        outputs = list(outcome.outputs)
        async for page in pages_after(self._page, outcome.task_id, first):
            outputs.extend(map(decode_output, page.outputs))
        return dataclasses.replace(outcome, outputs=outputs, outputs_truncated=False)

    async def outputs(self, task_id: str) -> AsyncIterator[Any]:
        """Every output of an ended task, decoded, in call-list order, fetched a page
        at a time (memory stays at one page); nothing for a task still running."""
        async for page in all_pages(self._page, task_id):
            for o in page.outputs:
                yield decode_output(o)

    async def result_pages(self, task_id: str, after: pb.TaskResult | None = None) -> AsyncIterator[pb.TaskResult]:
        """The raw pages (pb.TaskResult) of a task's result: every one, or those after
        ``after`` (a page already in hand)."""
        pages = all_pages(self._page, task_id) if after is None else pages_after(self._page, task_id, after)
        async for page in pages:
            yield page

    async def result_page(self, task_id: str, offset: int = 0, limit: int | None = None) -> pb.GetTaskResultResponse:
        """One GetTaskResult page: the outputs from ``offset`` that fit the worker's page
        budget, at most ``limit`` (at least one when set)."""
        req = pb.GetTaskResultRequest(task_id=task_id, outputs_offset=offset)
        if limit is not None:
            req.outputs_limit = limit
        return (await self._request(pb.SessionRequest(get_result=req)))[0].result

    async def _page(self, task_id: str, offset: int, limit: int | None) -> pb.TaskResult | None:
        r = await self.result_page(task_id, offset, limit)
        return r.result if r.HasField("result") else None

    async def cancel(self, task_id: str, reason: str = "") -> TaskOutcome:
        """CancelTask over this session: the task ends FAILED / CANCELLED (its calls
        are cancelled, its plugin writes nothing) and its outcome is returned; a task
        already terminal is returned as it is (``outcome.raw.cancelled`` is False).
        NotFound for an unknown task, and for another identity's (the same answer:
        only the owner or an admin cancels, and nobody else learns the id exists)."""
        r = (await self._request(pb.SessionRequest(
            cancel=pb.CancelTaskRequest(task_id=task_id, reason=reason))))[0].cancelled
        return TaskOutcome.from_pb(r.task_id, r.state, r.result if r.HasField("result") else None, self.addr, r)

    async def list_tasks(self, *, states: Iterable[str] = (), phases: Iterable[str] = (), instance_id: str = "",
                         page_size: int = 0, page_token: str = "", timeout_s: float = 10.0) -> pb.ListTasksResponse:
        """ListTasks (a unary call on this client's channel): one page of the caller's
        tasks (an admin's: every task). ``states``: names (RUNNING, FAILED, ...);
        ``phases``: RESERVED, PREPARING, BUILDER, CALLS, PLUGIN, TERMINAL. Pass the
        response's ``next_page_token`` back for the next page ("" on the last)."""
        if self._channel is None:
            raise SessionBroken("the client is not connected: use `async with WorkerClient(addr)` "
                                "or await connect()", grpc.StatusCode.FAILED_PRECONDITION)
        try:
            req = pb.ListTasksRequest(states=[pb.TaskState.Value("TASK_STATE_" + s.upper()) for s in states],
                                      phases=[p.upper() for p in phases], instance_id=instance_id,
                                      page_size=page_size, page_token=page_token)
        except ValueError as exc:
            raise InvalidArgument(f"states: {exc}; use ALLOCATED, RUNNING, SUCCEEDED or FAILED") from None
        try:
            return await pb_grpc.WorkerServiceStub(self._channel).ListTasks(req, timeout=timeout_s,
                                                                            metadata=self._metadata)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    # ---- task traces ------------------------------------------------

    async def trace(self, task_id: str, *, timeout_s: float = 30.0) -> TaskTrace:
        """The task's trace (GetTaskTrace, a unary call on this client's channel):
        ``(await c.trace(tid)).write("trace.json")``, then open it in Perfetto.
        NotFound for an unknown task (or one whose result was purged),
        TracingOff (FAILED_PRECONDITION) when the worker runs with tracing off."""
        if self._channel is None:
            raise SessionBroken("the client is not connected: use `async with WorkerClient(addr)` "
                                "or await connect()", grpc.StatusCode.FAILED_PRECONDITION)
        try:
            msg = await pb_grpc.WorkerServiceStub(self._channel).GetTaskTrace(
                pb.GetTaskTraceRequest(task_id=task_id), timeout=timeout_s, metadata=self._metadata)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                raise TracingOff(exc.details() or "") from None
            raise from_rpc_error(exc) from None
        return TaskTrace.from_pb(msg, self.addr)

    # ---- plumbing ------------------------------------------------------------------

    async def _request(self, req: pb.SessionRequest, expect: int = 1) -> list:
        if self._broken is not None:
            raise self._broken
        if self._call is None:
            raise SessionBroken("the client is not connected: use `async with WorkerClient(addr)` "
                                "or await connect()", grpc.StatusCode.FAILED_PRECONDITION)
        rid = next(self._ids)
        req.request_id = rid
        reply = _Reply(asyncio.get_running_loop().create_future(), expect)
        self._pending[rid] = reply
        self._outgoing.append(req)
        w = self._wake
        if w is not None and not w.done():
            w.set_result(None)
        try:
            return await reply.future
        finally:
            self._pending.pop(rid, None)

    def _listen(self, task_id: str, listener) -> None:
        self._listeners.setdefault(task_id, []).append(listener)

    def _unlisten(self, task_id: str, listener) -> None:
        ls = self._listeners.get(task_id)
        if ls is not None:
            try:
                ls.remove(listener)
            except ValueError:
                pass
            if not ls:
                del self._listeners[task_id]

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        call = self._call
        try:
            while True:
                if not self._outgoing:
                    self._wake = loop.create_future()
                    await self._wake
                    continue
                reqs = self._outgoing
                self._outgoing = []
                await call.write(pb.SessionRequestBatch(requests=reqs))
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the stream ended under the write
            # The reader sees the same end with the Worker's status (say,
            # RESOURCE_EXHAUSTED and why), which is what the callers should get.
            return

    async def _read_loop(self) -> None:
        call = self._call
        pending = self._pending
        listeners = self._listeners
        try:
            while True:
                batch = await call.read()
                if batch is grpc.aio.EOF:
                    break
                for ev in batch.events:
                    rid = ev.request_id
                    if ev.WhichOneof("event") == "update":
                        upd = ev.update
                        ls = listeners.get(upd.task_id)
                        if ls:
                            for listener in tuple(ls):
                                listener.update(upd)
                    if rid:
                        reply = pending.get(rid)
                        if reply is not None and reply.event(ev):
                            del pending[rid]
            end = SessionBroken(f"the worker at {self.addr} ended the session", grpc.StatusCode.OK)
            try:
                code = await call.code()
                if code != grpc.StatusCode.OK:
                    end = SessionBroken(f"the session with {self.addr} ended: {code.name}: "
                                        f"{await call.details()}", code)
            except Exception:  # noqa: BLE001 - status unavailable: keep the generic reason
                pass
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - AioRpcError when the stream breaks
            end = _broken_by(exc, self.addr)
        self._break(end)

    def _break(self, err: SessionBroken) -> None:
        if self._broken is not None:
            return
        self._broken = err
        for reply in list(self._pending.values()):
            reply.fail(err)
        self._pending.clear()
        for ls in list(self._listeners.values()):
            for listener in tuple(ls):
                listener.fail(err)
        w = self._wake
        if w is not None and not w.done():
            w.set_result(None)


def _broken_by(exc: BaseException, addr: str) -> SessionBroken:
    if isinstance(exc, grpc.aio.AioRpcError):
        return SessionBroken(f"the session with {addr} broke: {exc.code().name}: {exc.details()}", exc.code())
    return SessionBroken(f"the session with {addr} broke: {type(exc).__name__}: {exc}")
