"""CallGate: the first look at every call, before grpc reads its request.

Why: grpc.aio receives and decodes a request before the method handler runs, so
a handler that refuses a caller without credentials has already held the whole
message (up to grpcMaxMessageBytes). Any host that can reach the port could make
the Worker hold that much per call. The gate is a server interceptor: it sees the
method name and the metadata only, and a call it refuses is answered by a handler
that takes the request as a stream and never reads it, so the message is never
received into Python; grpc drops what arrived with the stream.

What it refuses, with the status and message the handler would give:
- a WorkerService or reflection call without valid credentials (WORKER_AUTH_MODE
  token): UNAUTHENTICATED. Under mtls the TLS handshake already refused a client
  without a certificate the client CA signed (the interceptor cannot see the
  peer); the handler derives the identity from it.
- new work (SubmitTask, RequestTaskSlot, a new TaskSession) while the Worker is
  over its memory budget (blockx.adapters.memory_budget): RESOURCE_EXHAUSTED,
  naming the budget and its setting.
grpc.health.v1 is never checked (probes carry no credentials).

The caller the gate identified reaches the handler through a context variable
tagged with the call's asyncio Task (grpc.aio runs a call's interceptors and its
handler in one Task); ``gated_caller`` returns it only inside that same Task, so
a value can never be taken for another call's. The Task is held weakly: a task
the handler starts copies the context, and must not keep the call's Task alive."""
from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import Callable

import grpc

from blockx.adapters.auth import Authenticator, Unauthenticated

_current_task = asyncio.current_task
# (a weak reference to the call's Task, its caller): set by the gate, read by the handler of the same call.
_GATED: contextvars.ContextVar[tuple[weakref.ref, object] | None] = contextvars.ContextVar("blockx_gated_caller",
                                                                                      default=None)
UNSET = object()            # gated_caller(): the gate did not identify this call
_HEALTH = "/grpc.health.v1.Health/"
NEW_WORK = ("SubmitTask", "RequestTaskSlot", "TaskSession")


def gated_caller():
    """The caller the gate identified for the running call, else UNSET."""
    v = _GATED.get()
    if v is None or v[0]() is not _current_task():
        return UNSET
    return v[1]


def _refusal(code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    """A handler that answers ``code`` without reading the request (a stream never iterated).
    Stream-stream for every method: a refused unary call receives its status and no message."""
    async def refuse(request_iterator, context) -> None:
        context.set_code(code)
        context.set_details(message)
    return grpc.stream_stream_rpc_method_handler(refuse)


class CallGate(grpc.aio.ServerInterceptor):
    """See the module docstring. ``count(method, code)`` counts a refusal as the
    handler would (blockx_grpc_requests_total); ``over_budget()`` returns the
    budget's refusal message while the Worker is over it, else None."""

    def __init__(self, auth: Authenticator, count: Callable[[str, str], None] | None = None,
                 over_budget: Callable[[], str | None] | None = None) -> None:
        self._auth = auth
        self._count = count
        self._over_budget = over_budget
        self._token = auth.mode == "token"
        self._refusals: dict[str, grpc.RpcMethodHandler] = {}   # one handler per (constant) message

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        if method.startswith(_HEALTH):
            return await continuation(handler_call_details)
        if self._token:
            try:
                caller = self._auth.caller_from_metadata(handler_call_details.invocation_metadata)
            except Unauthenticated as exc:
                return self._refuse(method, "UNAUTHENTICATED", str(exc))
            task = _current_task()
            if task is not None:
                _GATED.set((weakref.ref(task), caller))
        over = self._over_budget
        if over is not None and method.rpartition("/")[2] in NEW_WORK:
            message = over()
            if message is not None:
                self._counted(method, "RESOURCE_EXHAUSTED")
                return _refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, message)
        return await continuation(handler_call_details)

    def _refuse(self, method: str, code: str, message: str) -> grpc.RpcMethodHandler:
        self._counted(method, code)
        h = self._refusals.get(message)
        if h is None:
            h = _refusal(grpc.StatusCode[code], message)
            if len(self._refusals) < 64:      # the auth messages are a handful of constants
                self._refusals[message] = h
        return h

    def _counted(self, method: str, code: str) -> None:
        if self._count is not None and method.startswith("/blockx."):
            self._count(method.rpartition("/")[2], code)


__all__ = ["CallGate", "NEW_WORK", "UNSET", "gated_caller"]
