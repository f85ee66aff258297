"""WorkerService over grpc.aio: thin handlers that decode, call the orchestrator
synchronously (it runs on this same loop) and encode. Core refusals
(`WorkerError`) map to gRPC status codes (blockx.core.errors). Anything unexpected (a bug)
answers INTERNAL with a short message, is counted in blockx_grpc_requests_total
and logs its traceback (``_guarded``), for every RPC including the streams; it
never takes the server down. Every handler resolves its caller once at entry
(``_caller``, blockx.adapters.auth: UNAUTHENTICATED without valid credentials)
and the core decides what that caller may see (blockx.core.owners).

A call without credentials never reaches a handler: the call gate
(blockx.adapters.grpc.call_gate) refuses it before grpc reads its request, and hands
the caller it identified to the handler. A refused call holds nothing once it is
answered: grpc keeps the exception of ``context.abort`` with the call, and that
exception's traceback holds the handler's frames (the decoded request among
them), a reference cycle only the cyclic collector would free. ``_guarded``
takes the frames and chained exceptions off it (``_forget``) before grpc
re-raises it, so the request goes as soon as the call ends."""
from __future__ import annotations

import asyncio
import functools
import logging
from time import perf_counter

import grpc
import orjson
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from blockx.adapters.grpc import wire
from blockx.adapters.grpc.limits import GrpcLimits
from blockx.adapters.grpc.open_streams import OpenStreams
from blockx.adapters.grpc.request_decode import Undecodable, add_worker_service
from blockx.adapters.grpc.result_pages import PageTooLarge, ResultPages, page_request
from blockx.adapters.auth import Authenticator, GuardedReflection, Unauthenticated
from blockx.adapters.grpc.call_gate import UNSET, CallGate, gated_caller
from blockx.adapters.grpc.cancel import cancel, cancel_response
from blockx.adapters.grpc.task_listing import list_tasks
from blockx.adapters.grpc.session import (
    DEFAULT_MAX_PENDING_BYTES, DEFAULT_MAX_PENDING_EVENTS, MAX_WATCH_TASK_IDS, Session, SessionEnd,
)
from blockx.adapters.subscriptions import CLOSED, GONE, OVERFLOW, Subscription
from blockx.adapters.telemetry.trace_context import incoming as incoming_trace_context
from blockx.adapters.telemetry.trace_export import chrome_trace
from blockx.core.types import TaskState
from blockx.core.errors import ShareExceededError, WorkerError
from blockx.core.worker.requests import require_task_id
from blockx.tenant_view import tenant_strings
from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc

from typing import TYPE_CHECKING

if TYPE_CHECKING:     # a back-pointer: the Orchestrator is built first and hands itself in; it imports nothing of this module
    from blockx.adapters.orchestrator import Orchestrator
    from blockx.adapters.telemetry.metrics import Metrics
    from blockx.adapters.tls import ServerTLS
    from blockx.adapters.worker_status import WorkerStatusReader

log = logging.getLogger("blockx.grpc")
_TaskUpdate = pb.TaskUpdate
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["WorkerService"].full_name
_STREAMS = ("WatchTasks", "TaskSession")


def _status(err: WorkerError) -> grpc.StatusCode:
    return grpc.StatusCode[err.grpc_status_name]


def _forget(exc: BaseException) -> None:
    """Drop what an aborted call's exception holds: its frames and chained exceptions."""
    exc.__traceback__ = None
    exc.__context__ = None
    exc.__cause__ = None


def _guarded(handler):
    """A bug behind the RPC answers INTERNAL (counted, traceback logged) instead of
    grpc's UNKNOWN "Unexpected <class ...>" with the exception text. An abort
    (``context.abort``) ends here: grpc re-raises the exception it kept once the
    handler returns, and ``_forget`` has taken the handler's frames off it."""
    name = handler.__name__
    timed = name not in _STREAMS        # blockx_grpc_request_duration_seconds: unary RPCs only

    @functools.wraps(handler)
    async def wrapper(self, request, context):
        if type(request) is Undecodable:
            self._count(name, "INVALID_ARGUMENT")
            message = request.refusal()
            del request
            try:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
            except grpc.aio.AbortError as exc:
                _forget(exc)
            return None
        t0 = perf_counter()
        try:
            return await handler(self, request, context)
        except asyncio.CancelledError:
            raise
        except grpc.aio.AbortError as exc:
            _forget(exc)
        except Exception:  # noqa: BLE001 - the point of this wrapper
            log.exception("%s failed with an unexpected error", name)
            self._count(name, "INTERNAL")
            try:
                await context.abort(grpc.StatusCode.INTERNAL,
                                    f"internal error in the worker while handling {name}; see its log")
            except grpc.aio.AbortError as exc:
                _forget(exc)
        finally:
            if timed and self._metrics is not None:
                self._metrics.observe_grpc(name, perf_counter() - t0)
        return None
    return wrapper


class WorkerService(pb_grpc.WorkerServiceServicer):
    def __init__(self, orch: Orchestrator, metrics: Metrics | None = None, *, status: WorkerStatusReader | None = None, session_max_pending_events: int = DEFAULT_MAX_PENDING_EVENTS,
                 session_max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES, limits: GrpcLimits | None = None,
                 auth: Authenticator | None = None, over_budget=None) -> None:
        self._orch = orch
        self._auth = auth if auth is not None else Authenticator("none")
        self._metrics = metrics
        progress = getattr(orch, "progress", None)
        self._encoder = wire.TaskUpdateEncoder(progress.progress_of if progress is not None else None)
        self._status = status
        limits = limits or GrpcLimits()
        self._limits = limits
        self._delivery = delivery = ResultPages(limits.result_page_bytes, limits.max_message_bytes)
        self._sessions = OpenStreams("TaskSession", limits.max_task_sessions, "maxTaskSessions, MAX_TASK_SESSIONS",
                                     limits.max_task_sessions_per_identity,
                                     "maxTaskSessionsPerIdentity, MAX_TASK_SESSIONS_PER_IDENTITY")
        self._watches = OpenStreams("WatchTasks", limits.max_watch_streams, "maxWatchStreams, MAX_WATCH_STREAMS",
                                    limits.max_watch_streams_per_identity,
                                    "maxWatchStreamsPerIdentity, MAX_WATCH_STREAMS_PER_IDENTITY")
        share_refused = metrics.share_refused if metrics is not None else None
        self._session_limits = {"max_pending_events": session_max_pending_events,
                                "max_pending_bytes": session_max_pending_bytes, "delivery": delivery,
                                "over_budget": over_budget, "share_refused": share_refused}
        if metrics is not None:
            metrics.identity_streams_fn = self.streams_by_identity
        self._reads_trace_context = bool(getattr(orch, "wants_trace_context", False))   # spans or shadow on

    def streams_by_identity(self) -> dict[tuple[str, str], int]:
        """(kind, identity) -> open streams, for the identities held to a share (metrics)."""
        out = {("TaskSession", who): n for who, n in self._sessions.by_identity().items()}
        out.update({("WatchTasks", who): n for who, n in self._watches.by_identity().items()})
        return out

    def _trace_context(self, context):
        """The caller's W3C trace context (trace_context.py), read only when something uses it."""
        return incoming_trace_context(context.invocation_metadata()) if self._reads_trace_context else None

    def _count(self, method: str, code: str) -> None:
        m = self._metrics
        if m is not None:
            m.grpc_request(method, code)

    async def _caller(self, context, method: str):
        """The call's identity (None: unrestricted); UNAUTHENTICATED ends the call."""
        caller = gated_caller()
        if caller is not UNSET:
            return caller
        try:
            return self._auth.caller(context)
        except Unauthenticated as exc:
            await self._unauthenticated(context, method, exc)

    async def _unauthenticated(self, context, method: str, exc: Unauthenticated):
        self._count(method, "UNAUTHENTICATED")
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))

    async def _refuse(self, context, method: str, err: WorkerError):
        self._count(method, err.grpc_status_name)
        if type(err) is ShareExceededError and self._metrics is not None:
            self._metrics.share_refused(err.identity, err.share)
        await context.abort(_status(err), err.message)

    def _stream_refused(self, method: str, streams: OpenStreams, caller, share: str) -> None:
        self._count(method, "RESOURCE_EXHAUSTED")
        if self._metrics is not None and streams.identity_full(caller):
            self._metrics.share_refused(caller.name, share)

    async def _watch_overflow(self, context):
        self._count("WatchTasks", "RESOURCE_EXHAUSTED")
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, (
            f"this WatchTasks stream's queue overflowed (over {self._limits.watch_max_pending_updates} updates; "
            "watchMaxPendingUpdates, WATCH_MAX_PENDING_UPDATES): the client stopped reading while its tasks "
            "kept changing; read the stream, and watch the tasks that have not ended again "
            "(GetTaskResult shows where each is)"))

    async def _too_big(self, context, method: str, err: PageTooLarge):
        self._count(method, "RESOURCE_EXHAUSTED")
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, err.message)

    @_guarded
    async def RequestTaskSlot(self, request, context):
        caller = await self._caller(context, "RequestTaskSlot")
        try:
            snap = self._orch.request_task_slot(request.task_id, request.ttl_ms, caller)
        except WorkerError as err:
            await self._refuse(context, "RequestTaskSlot", err)
        resp = self._delivery.for_caller(caller).reply(snap, "slot")[0]          # a finished task's: the first page
        self._count("RequestTaskSlot", "OK")
        return resp

    @_guarded
    async def SubmitTask(self, request, context):
        caller = gated_caller()     # _caller inline: no coroutine per task on the unary path
        if caller is UNSET:
            try:
                caller = self._auth.caller(context)
            except Unauthenticated as exc:
                await self._unauthenticated(context, "SubmitTask", exc)
        try:
            req, shadow = wire.submit_request_from_pb(request)
            snap = self._orch.submit_task(req, shadow=shadow, raw_request=request, caller=caller,
                                          trace_context=self._trace_context(context), unary=True)
        except WorkerError as err:
            await self._refuse(context, "SubmitTask", err)
        resp = self._delivery.for_caller(caller).reply(snap, "submit")[0]        # a finished task's: the first page
        self._count("SubmitTask", "OK")
        return resp

    @_guarded
    async def GetTaskResult(self, request, context):
        caller = await self._caller(context, "GetTaskResult")
        try:
            offset, limit = page_request(request)
            snap = self._orch.get_task_result(request.task_id, caller)
            resp = self._delivery.for_caller(caller).reply(snap, "result", offset, limit)[0]
        except WorkerError as err:
            await self._refuse(context, "GetTaskResult", err)
        except PageTooLarge as err:
            await self._too_big(context, "GetTaskResult", err)
        self._count("GetTaskResult", "OK")
        return resp

    @_guarded
    async def WatchTasks(self, request, context):
        caller = gated_caller()     # _caller inline, as in SubmitTask
        if caller is UNSET:
            try:
                caller = self._auth.caller(context)
            except Unauthenticated as exc:
                await self._unauthenticated(context, "WatchTasks", exc)
        orch = self._orch
        subs = orch.subscriptions
        task_ids = list(dict.fromkeys(request.task_ids))   # dedupe, keep order
        if not task_ids:
            self._count("WatchTasks", "INVALID_ARGUMENT")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "task_ids is empty: name at least one task to watch")
        if len(task_ids) > MAX_WATCH_TASK_IDS:
            self._count("WatchTasks", "INVALID_ARGUMENT")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"{len(task_ids)} task_ids exceed the limit of {MAX_WATCH_TASK_IDS} per stream; "
                                "open several streams")
        if subs.closed:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the worker is shutting down")
        snaps = []
        try:
            for tid in task_ids:             # a malformed id is INVALID_ARGUMENT before any NOT_FOUND
                require_task_id(tid, "an entry of task_ids")
        except WorkerError as err:
            await self._refuse(context, "WatchTasks", err)
        for tid in task_ids:
            try:
                snaps.append(orch.get_task_result(tid, caller))
            except WorkerError as err:
                await self._refuse(context, "WatchTasks", err)
        watches = self._watches
        if not watches.enter(caller):
            self._stream_refused("WatchTasks", watches, caller, "watch_streams")
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, watches.refusal(caller))
        # A client that stops reading overflows the queue: the handler is cancelled
        # out of the write it waits on, and this stream alone ends. A task already
        # terminal in its snapshot publishes nothing more: only the others are attached
        # (none at all when every task has ended, the common case of a watch opened
        # after SubmitTask returned).
        live = [s.task_id for s in snaps if not s.is_terminal]
        sub = subs.attach(live, Subscription(self._limits.watch_max_pending_updates,
                                             asyncio.current_task().cancel)) if live else None
        fit = self._delivery.for_caller(caller).fit_update
        pending = set()
        shown = {}            # task id -> the TaskProgress last written (progress is not repeated)
        finished = False
        try:
            for snap in snaps:
                upd = self._encoder(snap)
                await context.write(fit(upd, snap))
                if not snap.is_terminal:
                    pending.add(snap.task_id)
                    if upd.HasField("progress"):
                        shown[snap.task_id] = upd.progress
            # States may have moved between the snapshot and the attach: the queue
            # holds every publish since attach, and repeats are filtered below.
            last = {s.task_id: s.state for s in snaps} if pending else {}
            while pending:
                item = await sub.queue.get()
                if item is OVERFLOW:
                    await self._watch_overflow(context)
                if item is CLOSED:
                    await context.abort(grpc.StatusCode.UNAVAILABLE,
                                        "the worker is shutting down; re-watch on another worker")
                if isinstance(item, tuple) and item[0] == GONE:
                    await context.abort(grpc.StatusCode.NOT_FOUND,
                                        f"task {item[1]!r} is gone: its slot reservation expired before SubmitTask")
                tid = item.task_id
                if type(item) is _TaskUpdate:          # progress only (ProgressTicker)
                    if tid in pending and shown.get(tid) != item.progress:
                        shown[tid] = item.progress
                        await context.write(item)
                    continue
                if tid not in pending or last.get(tid) == item.state:
                    continue
                last[tid] = item.state
                upd = self._encoder(item)
                if upd.HasField("progress"):
                    shown[tid] = upd.progress
                await context.write(fit(upd, item))
                if item.is_terminal:
                    pending.discard(tid)
            finished = True
            self._count("WatchTasks", "OK")
        except asyncio.CancelledError:
            if sub is None or not sub.overflowed:
                raise                       # the client went away
            await self._watch_overflow(context)
        finally:
            watches.leave(caller)
            if sub is not None:
                subs.detach(sub, disconnected=not finished)

    # ---- GetWorkerStatus ----
    @_guarded
    async def GetWorkerStatus(self, request, context):
        caller = await self._caller(context, "GetWorkerStatus")
        if caller is not None and not caller.admin:
            self._count("GetWorkerStatus", "PERMISSION_DENIED")
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"GetWorkerStatus shows the whole worker: it needs the admin identity, and "
                                f"this call is {caller.name!r} (a token named admin in WORKER_AUTH_TOKENS_FILE, "
                                "or the worker's own <STATE_DIR>/auth-token)")
        if self._status is None:
            self._count("GetWorkerStatus", "UNIMPLEMENTED")
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this server has no worker status wired")
        status = self._status.read()
        self._count("GetWorkerStatus", "OK")
        return status
    # ---- end GetWorkerStatus ----

    @_guarded
    async def TaskSession(self, request_iterator, context):
        caller = await self._caller(context, "TaskSession")     # once for the whole stream
        subs = self._orch.subscriptions
        if subs.closed:
            self._count("TaskSession", "UNAVAILABLE")
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the worker is shutting down")
        sessions = self._sessions
        if not sessions.enter(caller):
            self._stream_refused("TaskSession", sessions, caller, "task_sessions")
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, sessions.refusal(caller))
        try:
            # The client waits for this before its first write: a refusal above reaches it as
            # its status, never raced by a write into a closed stream.
            await context.send_initial_metadata(())
            session = Session(self._orch, self._encoder, self._count, caller=caller,
                              trace_context=self._trace_context(context), **self._session_limits)
        except BaseException:
            sessions.leave(caller)
            raise
        subs.register(session)
        loop = asyncio.get_running_loop()
        reader = loop.create_task(_read_session(session, request_iterator))
        writer = loop.create_task(_write_session(session, context))
        finished = False
        try:
            await asyncio.wait((writer, session.overflowed), return_when=asyncio.FIRST_COMPLETED)
            if not writer.done():
                writer.cancel()      # overflowed: a write may be blocked on the client that does not read
            try:
                await writer
                finished = True
                self._count("TaskSession", "OK")
            except (SessionEnd, asyncio.CancelledError):
                end = session.end
                if end is None:      # this handler itself was cancelled (the client went away)
                    raise
                self._count("TaskSession", end.code)
                await context.abort(grpc.StatusCode[end.code], end.message)
        finally:
            sessions.leave(caller)
            reader.cancel()
            writer.cancel()
            subs.detach(session, disconnected=not finished)

    # ---- task traces -------------------------------------------------

    @_guarded
    async def GetTaskTrace(self, request, context):
        caller = await self._caller(context, "GetTaskTrace")
        tid = request.task_id
        if not tid:
            self._count("GetTaskTrace", "INVALID_ARGUMENT")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "task_id is required: name the task whose trace you want")
        traces = getattr(self._orch, "traces", None)
        if traces is None:
            self._count("GetTaskTrace", "FAILED_PRECONDITION")
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                "task tracing is off on this worker: start it with TRACE_ENABLED=true "
                                "(traceEnabled in WORKER_CONFIG) to record traces of the tasks it runs")
        try:
            snap = self._orch.get_task_result(tid, caller)
        except WorkerError as err:      # unknown (or another identity's), or its result (and trace) purged
            await self._refuse(context, "GetTaskTrace", err)
        tr = traces.get(tid)
        if tr is None:
            self._count("GetTaskTrace", "NOT_FOUND")
            await context.abort(grpc.StatusCode.NOT_FOUND, (
                f"task {tid!r} has no trace on this worker: it holds a slot but was not submitted yet"
                if snap.state == TaskState.ALLOCATED else
                f"task {tid!r} has no trace on this worker any more: ended traces are kept within "
                f"TRACE_RETAINED_MAX_EVENTS ({traces.retained_max_events} events) and the oldest are evicted "
                "first (raise it, or fetch traces sooner); or the task was refused before it started"))
        doc = chrome_trace(tr, traces.now())
        if caller is not None and not caller.admin:      # its failure messages as a tenant reads them
            doc = tenant_strings(doc)
        body = orjson.dumps(doc)
        self._count("GetTaskTrace", "OK")
        return pb.TaskTrace(
            task_id=tid, state=int(snap.state), complete=tr.ended, sampled=tr.sampled,
            sample_every=tr.sample_every, truncated=tr.truncated > 0, events_recorded=len(tr),
            events_dropped=tr.dropped, max_events=traces.max_events, chrome_trace_json=body)

    # ---- end task traces -----------------------------------------------------------------

    # ---- cancel and list (blockx.adapters.grpc.cancel, blockx.adapters.grpc.task_listing) ----
    @_guarded
    async def CancelTask(self, request, context):
        caller = await self._caller(context, "CancelTask")
        try:
            res = cancel(self._orch, request, caller)
        except WorkerError as err:
            await self._refuse(context, "CancelTask", err)
        resp = cancel_response(res, self._delivery.for_caller(caller))[0]
        self._count("CancelTask", "OK")
        return resp

    @_guarded
    async def ListTasks(self, request, context):
        caller = await self._caller(context, "ListTasks")
        try:
            resp = list_tasks(self._orch, request, caller)
        except WorkerError as err:
            await self._refuse(context, "ListTasks", err)
        self._count("ListTasks", "OK")
        return resp
    # ---- end cancel and list ----


async def _write_session(session: Session, context) -> None:
    """Write the session's event batches until it finishes (returns) or ends (SessionEnd)."""
    while True:
        events = await session.next_batch()
        if events is None:
            return
        await context.write(pb.SessionEventBatch(events=events))


async def _read_session(session: Session, request_iterator) -> None:
    try:
        async for batch in request_iterator:
            session.handle(batch)
        session.eof()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - the stream broke under the reader
        if session.end is not None:
            return               # the Worker ended the session: its abort stops the reader
        if not isinstance(exc, grpc.RpcError):
            log.exception("TaskSession reader failed")
        session.fail("INTERNAL" if not isinstance(exc, grpc.RpcError) else "CANCELLED",
                     f"reading the session's requests failed: {type(exc).__name__}")


def build_server(orch: Orchestrator, *, listen_addr: str, keepalive_time_ms: int, keepalive_timeout_ms: int,
                 metrics: Metrics | None = None, session_max_pending_events: int = DEFAULT_MAX_PENDING_EVENTS,
                 session_max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
                 tls: ServerTLS | None = None, status: WorkerStatusReader | None = None,
                 limits: GrpcLimits | None = None,
                 auth: Authenticator | None = None,
                 budget=None) -> tuple[grpc.aio.Server, health.aio.HealthServicer, int]:
    """A server with WorkerService, grpc.health.v1 (starts NOT_SERVING, open to
    probes) and reflection (behind `auth`). Returns (server, health servicer,
    bound port). With `tls` (blockx.adapters.tls.ServerTLS) the port speaks TLS
    only. `auth` None: no authentication (what WORKER_AUTH_MODE=none configures).
    ``limits`` (blockx.adapters.grpc.limits) bounds messages, streams, RPCs and connections;
    ``budget`` (blockx.adapters.memory_budget.MemoryBudget) refuses new work past the
    Worker's memory budget. The call gate (blockx.adapters.grpc.call_gate) sees every call first."""
    limits = limits or GrpcLimits()
    auth = auth if auth is not None else Authenticator("none")
    count = metrics.grpc_request if metrics is not None else None
    over_budget = budget.refusal if budget is not None else None
    server = grpc.aio.server(interceptors=[CallGate(auth, count, over_budget)], options=[
        ("grpc.keepalive_time_ms", keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        *limits.server_options(),
        ("grpc.so_reuseport", 0),
    ], maximum_concurrent_rpcs=limits.max_concurrent_rpcs)
    add_worker_service(WorkerService(
        orch, metrics, status=status, session_max_pending_events=session_max_pending_events,
        session_max_pending_bytes=session_max_pending_bytes, limits=limits, auth=auth,
        over_budget=over_budget), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(GuardedReflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
        auth), server)
    addr = listen_addr if not listen_addr.startswith(":") else "0.0.0.0" + listen_addr
    port = server.add_insecure_port(addr) if tls is None else server.add_secure_port(addr, tls.credentials())
    if port == 0:
        raise OSError(f"cannot listen on {listen_addr!r}: the address is in use or invalid")
    return server, health_servicer, port


# Liveness: SERVING from the moment the server starts until it stops, draining
# included, so a liveness probe never restarts a worker that is draining; the
# readiness names ("" and the WorkerService) turn NOT_SERVING at the drain.
LIVENESS_SERVICE = "blockx.liveness"


async def set_alive(health_servicer) -> None:
    await health_servicer.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)


async def set_health(health_servicer, serving: bool) -> None:
    status = (health_pb2.HealthCheckResponse.SERVING if serving
              else health_pb2.HealthCheckResponse.NOT_SERVING)
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, status)
