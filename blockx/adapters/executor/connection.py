"""One executor's UDS connection: frame decoding, heartbeats, reservation release.

Theory of operation:
- Callback driven (asyncio.Protocol): data_received decodes every complete
  frame of the chunk in one pass and hands the call frames (CallCompleted,
  CallFailed, CallWaiting) of that chunk to the handler as ONE batch, after the
  terminal frames released their reservations (releaseOnTerminal).
- The first valid Heartbeat names the executor (executorId) and attaches the
  connection; any other frame before it is a protocol error. A later Heartbeat
  with another executorId is a protocol error too.
- That first Heartbeat must carry the executor's one-time `attachSecret`
  (credentials.py); a connection accepted on an executor's private listener
  (`pinned_id`) may only attach as that executor. The adapter refuses an attach
  with a wrong or missing secret, an unknown id, or the id of an executor that
  is already attached (the live connection stays); the refused connection is
  closed with a logged reason and is never told anything.
- A call frame (CallCompleted, CallFailed, CallWaiting) about a call this
  connection was not sent (no dispatched reservation here) is refused: dropped
  before the handler, counted and logged. Only the executor that runs a call
  speaks for it; the check is one dict lookup the terminal frames already do.
- Heartbeats update the capacity view and are answered with HeartbeatAck
  (best effort: a full outbox just skips the ack). The Heartbeat that attaches
  decides, once, whether ExecuteCalls go out batched (its `features` list
  FEATURE_EXECUTE_CALL_BATCH and the adapter has batching on: batch_sender.py).
- Every inbound envelope goes through messages.validate (types checked,
  optional defaults filled in place, so handlers can index payloads freely).
  Any malformed frame (FrameError from the codec, ProtocolError from
  validation or from the rules above) closes THIS connection with a logged reason and reports it lost.
  Valid frames decoded before the bad one in the same chunk are still
  delivered first: they are the executor's truth. Nothing here raises into
  the event loop; a failing handler callback is logged and the connection
  carries on.
- The adapter owns the registry and the lost/attach bookkeeping; this class
  only reports to it."""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import TYPE_CHECKING, Any

from blockx._fast import load
from blockx._fast.errors import FrameError, OutboxClosed, OutboxFull, ProtocolError
from blockx.core.dispatch.reservations import NOT_DISPATCHED, Reservations
from blockx.protocol import messages

from .batch_sender import BatchSender

if TYPE_CHECKING:     # a back-pointer: the adapter makes its connections
    from blockx.adapters.executor.adapter import ExecutorAdapter

_codec = load("codec")
_Outbox = load("outbox").Outbox
FrameDecoder = _codec.FrameDecoder
encode_frame = _codec.encode_frame
encode_execute_call = _codec.encode_execute_call
encode_resume_result = _codec.encode_resume_result

HEARTBEAT_ACK_FRAME = encode_frame(messages.heartbeat_ack())

_PEERCRED = struct.Struct("3i")
# Capacity math needs these non-negative (messages.validate checks the types).
_HB_NON_NEGATIVE = ("pid", "seq", "runnableCount", "inflightCount", "availableContexts",
                    "memoryBytes")
_validate = messages.validate
_route_fast = messages.validate_fast  # validate()'s fast path, one call less
_INBOUND = messages.EXECUTOR_TO_WORKER
HEARTBEAT = messages.HEARTBEAT
CALL_COMPLETED = messages.CALL_COMPLETED
CALL_FAILED = messages.CALL_FAILED
FEATURE_EXECUTE_CALL_BATCH = messages.FEATURE_EXECUTE_CALL_BATCH


class ExecutorConnection(asyncio.Protocol):
    __slots__ = (
        "adapter", "counters", "fixed_capacity", "decoder", "transport", "outbox", "reservations", "closed",
        "executor_id", "peer_pid", "connected_at_ms", "attached_at_ms",
        "last_heartbeat_at_ms", "pid", "heartbeat_seq", "runnable_count", "inflight_count",
        "available_contexts", "memory_bytes", "running_call_id", "scheduler_active_at_ms",
        "reported_scheduler_active_at_ms", "cpu_user_ms", "cpu_system_ms", "batch", "pinned_id",
    )

    def __init__(self, adapter: ExecutorAdapter, pinned_id: str = "") -> None:
        self.adapter = adapter
        self.counters = adapter.counters
        self.fixed_capacity = adapter.executor_contexts  # 0: estimate from heartbeats
        self.decoder = FrameDecoder()
        self.transport: Any = None       # set by connection_made, as asyncio hands it over
        self.outbox: Any = None
        self.reservations = Reservations()
        self.closed = False
        self.executor_id = ""  # "" until the first valid Heartbeat
        self.peer_pid = 0
        self.connected_at_ms = 0
        self.attached_at_ms = 0
        self.last_heartbeat_at_ms = 0
        self.pid = 0
        self.heartbeat_seq = 0
        self.runnable_count = 0
        self.inflight_count = 0
        self.available_contexts = 0
        self.memory_bytes = 0
        self.running_call_id = ""
        self.scheduler_active_at_ms = 0  # in the adapter's clock
        self.reported_scheduler_active_at_ms = 0  # as the executor sent it
        self.cpu_user_ms = 0
        self.cpu_system_ms = 0
        self.batch: BatchSender | None = None  # set at attach when ExecuteCallBatch is negotiated
        self.pinned_id = pinned_id  # accepted on this executor's private listener: only it may attach

    # ---- capacity view (see snapshot.py for the rule) ----
    @property
    def capacity(self) -> int:
        return self.fixed_capacity or self.available_contexts + self.inflight_count

    @property
    def free_contexts(self) -> int:
        free = self.capacity - len(self.reservations)
        return free if free > 0 else 0

    @property
    def usable_contexts(self) -> int:
        usable = self.capacity - self.reservations.draining_count
        return usable if usable > 0 else 0

    # ---- asyncio.Protocol ----
    def connection_made(self, transport) -> None:
        self.transport = transport
        adapter = self.adapter
        self.outbox = _Outbox(transport, adapter.loop, adapter.outbox_depth, adapter.outbox_max_batch)
        self.connected_at_ms = adapter.clock_ms()
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                self.peer_pid, _uid, _gid = _PEERCRED.unpack(
                    sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
            except (OSError, AttributeError, struct.error):
                pass  # not Linux: pid_of falls back to the heartbeat pid
        adapter._connection_made(self)

    def connection_lost(self, exc) -> None:
        if self.closed:
            return
        reason = "connection closed by the executor" if exc is None else f"connection broken: {exc}"
        try:
            self.decoder.eof()
        except FrameError as err:
            reason = f"{reason} ({err})"
        self.adapter._lose(self, reason)

    def eof_received(self):
        return False  # close our side too; connection_lost reports it

    def pause_writing(self) -> None:
        self.outbox.pause_writing()

    def resume_writing(self) -> None:
        self.outbox.resume_writing()

    def data_received(self, data) -> None:
        if self.closed:
            return
        self.counters.uds_bytes_in += len(data)
        try:
            frames = self.decoder.feed(data)
        except FrameError as exc:
            if exc.frames:
                self._process(exc.frames)
            if not self.closed:
                self.adapter._lose(self, f"malformed frame ({type(exc).__name__}): {exc}", malformed=True)
            return
        if frames:
            self._process(frames)

    # ---- frame handling ----
    def _process(self, frames: list) -> None:
        self.counters.uds_frames_in += len(frames)
        batch = []
        error = None
        reservations = self.reservations
        attempt_of = reservations.attempt_of
        attached = bool(self.executor_id)
        try:
            for item in frames:
                env = item[0]
                # The hot frames first: a well-formed CallCompleted or CallWaiting of an
                # attached executor (anything unusual takes the general validation below).
                if attached and (payload := _route_fast(env, _INBOUND)) is not None:
                    if env["messageType"] == CALL_COMPLETED:
                        if not reservations.release_on_terminal(env["callId"], payload["attemptSeq"]) \
                                and not self._dispatched_here(env):
                            continue
                    else:
                        dispatched = attempt_of(env["callId"])
                        if dispatched is None or dispatched == NOT_DISPATCHED:
                            self.adapter._refuse_frame(self, env)
                            continue
                    batch.append(item)
                    continue
                payload = _validate(env, _INBOUND)  # fills optional defaults in place
                mt = env["messageType"]
                if mt == HEARTBEAT:
                    self._heartbeat(payload)
                    if self.closed:  # a callback closed us while attaching, or the attach was refused
                        return
                elif not self.executor_id:
                    raise ProtocolError(f"{mt} frame before the first Heartbeat")
                else:
                    if mt == CALL_COMPLETED or mt == CALL_FAILED:
                        if (not reservations.release_on_terminal(env["callId"], payload["attemptSeq"])
                                and not self._dispatched_here(env)):
                            continue
                    elif not self._dispatched_here(env):
                        continue
                    batch.append(item)
        except ProtocolError as exc:
            error = exc
        if batch and not self.closed:
            self.adapter._deliver(self, batch)
        if error is not None and not self.closed:
            self.adapter._lose(self, f"protocol error: {error}", malformed=True)

    def _dispatched_here(self, env: dict) -> bool:
        """Whether this connection was sent the call `env` is about; a frame about
        any other call is refused (reported to the adapter, never delivered). A
        terminal frame of an older attempt of a call sent here still passes: the
        dispatcher ignores it as stale, as before."""
        dispatched = self.reservations.attempt_of(env["callId"])
        if dispatched is not None and dispatched != NOT_DISPATCHED:
            return True
        self.adapter._refuse_frame(self, env)
        return False

    def _heartbeat(self, p: dict) -> None:
        eid = p["executorId"]
        if not eid:
            raise ProtocolError("Heartbeat with an empty executorId")
        if self.executor_id and eid != self.executor_id:
            raise ProtocolError(f"Heartbeat executorId changed from {self.executor_id!r} to {eid!r:.60}")
        for key in _HB_NON_NEGATIVE:
            if p[key] < 0:
                raise ProtocolError(f"Heartbeat {key} must not be negative, got {p[key]}")
        if not self.executor_id:
            refused = self.adapter._attach_refusal(self, eid, p.get("attachSecret"))
            if refused:
                self.adapter._refuse_attach(self, eid, refused)
                return
        now = self.adapter.clock_ms()
        self.pid = p["pid"]
        self.heartbeat_seq = p["seq"]
        self.runnable_count = p["runnableCount"]
        self.inflight_count = p["inflightCount"]
        self.available_contexts = p["availableContexts"]
        self.memory_bytes = p["memoryBytes"]
        self.cpu_user_ms = p["cpuUserMs"]
        self.cpu_system_ms = p["cpuSystemMs"]
        self.running_call_id = p["runningCallId"]
        self.last_heartbeat_at_ms = now
        reported_active = p["lastSchedulerActiveAtMs"]
        sent_at = p["sentAtMs"]
        if sent_at:
            age = sent_at - reported_active
            self.scheduler_active_at_ms = now - (age if age > 0 else 0)
        elif reported_active != self.reported_scheduler_active_at_ms or not self.executor_id:
            self.scheduler_active_at_ms = now  # no send time: "moved since the last beat" = now
        self.reported_scheduler_active_at_ms = reported_active
        try:
            self.outbox.enqueue(HEARTBEAT_ACK_FRAME)
            self.counters.uds_frames_out += 1
            self.counters.uds_bytes_out += len(HEARTBEAT_ACK_FRAME)
        except (OutboxFull, OutboxClosed):
            pass  # the ack is advisory; a lost one is harmless
        if not self.executor_id:
            self.executor_id = eid
            self.attached_at_ms = now
            features = p.get("features")
            if (self.adapter.execute_call_batch and type(features) is list
                    and FEATURE_EXECUTE_CALL_BATCH in features):
                self.batch = BatchSender(self.outbox, self.counters, _codec.MAX_FRAME_BYTES)
            self.adapter._attach(self)
