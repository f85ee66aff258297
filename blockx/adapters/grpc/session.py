"""One TaskSession stream: many tasks on one gRPC stream (docs/grpc.md, "TaskSession").

A Session answers each request of a SessionRequestBatch in order, synchronously
(the orchestrator runs on this loop), and collects the replies and the updates
of the tasks it watches into one outgoing list. The stream's writer takes the
whole list at once: everything that became ready in one loop iteration goes out
as one SessionEventBatch, and while a write waits for the client, the next
batch grows. That list is bounded (events and approximate bytes): a client that
stops reading overflows it, and only that session ends, with RESOURCE_EXHAUSTED.

Watches are Watch attachments in the core through the SubscriptionManager: a
task watched here is delivered its snapshots (``deliver``); a state already
shown on this session is not repeated; the terminal update ends that task's
watch. The session keeps only the last state (and TaskProgress) it showed per
watched task (the truth stays in WorkerCore and the DispatcherCore). Progress-only
updates (``progress``) are shown only while the task's watch lasts and only when
their counts differ from the ones last shown.

A result goes out in pages (``ResultPages``): a reply or an update carries the
outputs that fit resultPageBytes, and get_result's outputs_offset fetches the
rest, so no result ends the session; the one reply that can be too large for a
gRPC message (one output asked for by count, ``PageTooLarge``) is a SessionError
RESOURCE_EXHAUSTED for that request alone. A request batch that
does not decode (``Undecodable``) ends the session INVALID_ARGUMENT: which of its
requests it held cannot be known, so none can be answered.
"""
from __future__ import annotations

import asyncio
import logging

import grpc

from blockx.adapters.grpc import wire
from blockx.adapters.grpc.cancel import cancel, cancel_response
from blockx.adapters.grpc.request_decode import Undecodable
from blockx.adapters.grpc.result_pages import PageTooLarge, ResultPages, page_request
from blockx.core.errors import InvalidArgumentError, ShareExceededError, WorkerError
from blockx.core.worker.requests import require_task_id
from blockx.worker.v1 import worker_pb2 as pb

from typing import TYPE_CHECKING

if TYPE_CHECKING:     # a back-pointer: the Orchestrator is built first and hands itself in; it imports nothing of this module
    from blockx.adapters.orchestrator import Orchestrator

log = logging.getLogger("blockx.session")

MAX_WATCH_TASK_IDS = 10_000
DEFAULT_MAX_PENDING_EVENTS = 65_536
DEFAULT_MAX_PENDING_BYTES = 64 * 1024 * 1024
MAX_BATCH_BYTES = 1024 * 1024      # one SessionEventBatch stays far below a client's 4 MiB default limit
EVENT_OVERHEAD_BYTES = 96          # a small event's rough footprint, for the byte bound

_CODE = {c.name: c.value[0] for c in grpc.StatusCode}
_SessionEvent = pb.SessionEvent
_SessionError = pb.SessionError


class SessionEnd(Exception):
    """The Worker ends this session: ``code`` is a grpc.StatusCode name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Session:
    __slots__ = ("_orch", "_subs", "_encoder", "_count", "_caller", "_max_events", "_max_bytes", "_loop",
                 "_delivery", "_batch_bytes", "_out", "_sizes", "_bytes", "_waiter", "_last", "_shown",
                 "_eof", "_end", "overflowed", "_trace_context", "_over_budget", "_share_refused")

    def __init__(self, orch: Orchestrator, encoder: wire.TaskUpdateEncoder, count, *,
                 max_pending_events: int = DEFAULT_MAX_PENDING_EVENTS,
                 max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
                 delivery: ResultPages | None = None, caller=None, trace_context=None,
                 over_budget=None, share_refused=None) -> None:
        self._orch = orch
        self._over_budget = over_budget          # () -> refusal | None: the memory budget (memory_budget.py)
        self._share_refused = share_refused      # (identity, share) -> None: the fair-share metric
        self._caller = caller                    # the stream's identity, resolved once (blockx.adapters.auth)
        self._trace_context = trace_context      # the stream's W3C trace context, parent of its tasks (trace_context.py)
        self._delivery = delivery = (delivery or ResultPages()).for_caller(caller)   # a tenant's: no server paths
        # One SessionEventBatch of several events stays within one message too.
        self._batch_bytes = min(MAX_BATCH_BYTES, delivery.fits_bytes)
        self._subs = orch.subscriptions
        self._encoder = encoder
        self._count = count                      # (method, code) -> None: the RPC counter
        self._max_events = max_pending_events
        self._max_bytes = max_pending_bytes
        self._loop = asyncio.get_running_loop()
        self._out: list = []                     # events not yet handed to the writer
        self._sizes: list[int] = []              # their approximate sizes
        self._bytes = 0
        # Resolved on overflow: the stream ends at once, even with a write blocked on the client.
        self.overflowed: asyncio.Future = self._loop.create_future()
        self._waiter: asyncio.Future | None = None
        self._last: dict[str, int] = {}          # watched task id -> last state shown here
        self._shown: dict[str, object] = {}      # watched task id -> last pb.TaskProgress shown here
        self._eof = False                        # the client sent its last request
        self._end: SessionEnd | None = None

    @property
    def end(self) -> SessionEnd | None:
        """Why the Worker ends this session, once it does."""
        return self._end

    # ---- requests ------------------------------------------------------------------

    def handle(self, batch: pb.SessionRequestBatch) -> None:
        if type(batch) is Undecodable:
            self.fail("INVALID_ARGUMENT", "a SessionRequestBatch of this session " + batch.refusal()
                      + "; its requests were not handled, and the session ends (the requests before it were)")
            return
        try:
            for req in batch.requests:
                if self._end is not None:
                    return
                self._handle(req)
        finally:
            self._orch.start_accepted()      # this batch's tasks start now, together (not behind the next read)

    def _handle(self, req: pb.SessionRequest) -> None:
        rid = req.request_id
        op = req.WhichOneof("op")
        orch = self._orch
        try:
            if (op == "submit" or op == "request_slot") and self._over_budget is not None:
                refused = self._over_budget()
                if refused is not None:
                    self._error(rid, "RESOURCE_EXHAUSTED", refused, op)
                    return
            if op == "submit":
                self._submit(rid, req.submit, req.follow)
            elif op == "request_slot":
                r = req.request_slot
                snap = orch.request_task_slot(r.task_id, r.ttl_ms, self._caller)
                resp, size = self._delivery.reply(snap, "slot")
                self._emit(_SessionEvent(request_id=rid, slot=resp), size)
            elif op == "get_result":
                g = req.get_result
                offset, limit = page_request(g)
                snap = orch.get_task_result(g.task_id, self._caller)
                resp, size = self._delivery.reply(snap, "result", offset, limit)
                self._emit(_SessionEvent(request_id=rid, result=resp), size)
            elif op == "watch":
                self._watch(rid, req.watch.task_ids)
            elif op == "cancel":
                res = cancel(orch, req.cancel, self._caller)
                resp, size = cancel_response(res, self._delivery)
                self._emit(_SessionEvent(request_id=rid, cancelled=resp), size)
            else:
                self._error(rid, "INVALID_ARGUMENT",
                            "the request sets no op: set one of request_slot, submit, get_result, watch or cancel")
                return
        except (WorkerError, PageTooLarge) as err:
            self._error(rid, err.grpc_status_name, err.message, op)
            if type(err) is ShareExceededError and self._share_refused is not None:
                self._share_refused(err.identity, err.share)
            return
        except Exception:  # noqa: BLE001 - a bug answers this request, never ends the session
            log.exception("TaskSession %s request %d failed", op, rid)
            self._error(rid, "INTERNAL", f"internal error in the worker while handling {op}; see its log", op)
            return
        self._count(_METHOD[op], "OK")

    def _submit(self, rid: int, sub: pb.SubmitTaskRequest, follow: bool) -> None:
        req, shadow = wire.submit_request_from_pb(sub)
        snap = self._orch.submit_task(req, shadow=shadow, raw_request=sub, caller=self._caller,
                                      trace_context=self._trace_context)
        resp, size = self._delivery.reply(snap, "submit")     # a finished task's: the first page
        self._emit(_SessionEvent(request_id=rid, submitted=resp), size)
        if follow and not snap.is_terminal:
            tid = snap.task_id
            if tid not in self._last:
                self._last[tid] = snap.state
                self._subs.attach((tid,), self)

    def _watch(self, rid: int, task_ids) -> None:
        ids = list(dict.fromkeys(task_ids))
        if not ids:
            raise InvalidArgumentError("watch.task_ids is empty: name at least one task to watch")
        if len(ids) > MAX_WATCH_TASK_IDS:
            raise InvalidArgumentError(f"{len(ids)} task_ids exceed the limit of {MAX_WATCH_TASK_IDS} "
                                       "per watch request; send several watch requests")
        for tid in ids:                           # a malformed id is INVALID_ARGUMENT before any NOT_FOUND
            require_task_id(tid, "an entry of watch.task_ids")
        get = self._orch.get_task_result
        caller = self._caller
        snaps = [get(tid, caller) for tid in ids]   # NotFound for any id (or another's): nothing is watched
        encode = self._encoder
        attach = []
        fit = self._delivery.update_page
        for snap in snaps:
            upd = encode(snap)
            sent, size = fit(upd, snap)
            self._emit(_SessionEvent(request_id=rid, update=sent), size)
            if not snap.is_terminal:
                tid = snap.task_id
                if tid not in self._last:
                    attach.append(tid)
                self._last[tid] = snap.state
                if upd.HasField("progress"):
                    self._shown[tid] = upd.progress
        if attach:
            self._subs.attach(attach, self)

    def _error(self, rid: int, code: str, message: str, op: str | None = None) -> None:
        self._count(_METHOD.get(op or "", "TaskSession/none"), code)
        self._emit(_SessionEvent(request_id=rid, error=_SessionError(code=_CODE[code], message=message)))

    # ---- subscriber ------------------------------------------------------------------

    def deliver(self, snap) -> None:
        tid = snap.task_id
        last = self._last.get(tid)
        if last is None or last == snap.state:
            return
        upd = self._encoder(snap)
        if snap.is_terminal:
            del self._last[tid]
            self._shown.pop(tid, None)
            self._subs.detach_task(self, tid, False)
        else:
            self._last[tid] = snap.state
            if upd.HasField("progress"):
                self._shown[tid] = upd.progress
        sent, size = self._delivery.update_page(upd, snap)
        self._emit(_SessionEvent(update=sent), size)

    def progress(self, update) -> None:
        """A progress-only update (ProgressTicker) of a task this session may watch."""
        tid = update.task_id
        if tid not in self._last:
            return
        p = update.progress
        if self._shown.get(tid) == p:
            return
        self._shown[tid] = p
        self._emit(_SessionEvent(update=update))

    def gone(self, task_id: str) -> None:
        """A watched reservation lapsed before SubmitTask: the task no longer exists.
        Its watch ends with an update in TASK_STATE_UNSPECIFIED saying so."""
        if self._last.pop(task_id, None) is None:
            return
        self._shown.pop(task_id, None)
        self._subs.detach_task(self, task_id, False)
        self._emit(_SessionEvent(update=pb.TaskUpdate(
            task_id=task_id, state=pb.TASK_STATE_UNSPECIFIED, is_terminal=True,
            result=pb.TaskResult(state=pb.TASK_STATE_UNSPECIFIED, failure_code="SLOT_LOST",
                                 failure_message=f"task {task_id!r} is gone: its slot reservation "
                                                 "expired before SubmitTask"))))

    def close(self) -> None:
        """Shutdown: the stream ends with UNAVAILABLE after what is already queued."""
        self._finish(SessionEnd("UNAVAILABLE", "the worker is shutting down; open a session on another worker"))

    # ---- the outgoing side -------------------------------------------------------------

    def _emit(self, event, size: int = 0) -> None:
        out = self._out
        out.append(event)
        size += EVENT_OVERHEAD_BYTES
        self._sizes.append(size)
        self._bytes += size
        if len(out) > self._max_events or self._bytes > self._max_bytes:
            self._overflow()
            return
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _overflow(self) -> None:
        n, b = len(self._out), self._bytes
        self._out = []               # drop them now: the memory is what the bound protects
        self._sizes = []
        self._bytes = 0
        log.warning("TaskSession ended: %d events (~%d bytes) wait for a client that does not read", n, b)
        if not self.overflowed.done():
            self.overflowed.set_result(None)
        self._finish(SessionEnd(
            "RESOURCE_EXHAUSTED",
            f"this session's outgoing queue overflowed ({n} events, ~{b} bytes; limits "
            f"{self._max_events} events, {self._max_bytes} bytes): the client stopped reading "
            "while it kept sending requests; read the stream's events and open a new session"))

    def _finish(self, end: SessionEnd) -> None:
        if self._end is None:
            self._end = end
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def fail(self, code: str, message: str) -> None:
        self._finish(SessionEnd(code, message))

    def eof(self) -> None:
        """The client half-closed: end OK once every watched task has ended."""
        self._eof = True
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def next_batch(self) -> list | None:
        """The events ready now (waits for some); None when the session is finished.
        Raises SessionEnd when the Worker ends it (after what was already queued)."""
        while True:
            out = self._out
            if out:
                sizes = self._sizes
                cap = self._batch_bytes
                if self._bytes <= cap:
                    self._out = []
                    self._sizes = []
                    self._bytes = 0
                    return out
                # Too big for one message: the longest prefix under the cap (at least one event).
                n, total = 1, sizes[0]
                while n < len(sizes) and total + sizes[n] <= cap:
                    total += sizes[n]
                    n += 1
                self._out = out[n:]
                self._sizes = sizes[n:]
                self._bytes -= total
                return out[:n]
            if self._end is not None:
                raise self._end
            if self._eof and not self._last:
                return None
            self._waiter = w = self._loop.create_future()
            await w
            self._waiter = None


_METHOD = {op: f"TaskSession/{op}" for op in ("submit", "request_slot", "get_result", "watch", "cancel")}

