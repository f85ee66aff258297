"""ExecutorAdapter: the Worker side of the executor UDS protocol.

Theory of operation:
- Everything runs on the one event loop; no Task or Future per call. Executor
  connections are asyncio.Protocols (connection.py); the orchestrator learns
  about executors through three synchronous callbacks on `handler`:
  on_executor_attached(executor_id), on_executor_frames(executor_id, frames)
  and on_executor_lost(executor_id, reason). A handler callback that raises is
  logged; it never takes a connection or the loop down.
- An executor is known by the executorId of its first Heartbeat, which must
  bring the one-time secret the pool issued for that id (credentials.py). An
  attach with a wrong or missing secret, an id nobody issued a secret for, the
  id of an executor that is attached (the live connection stays: a respawned
  executor only attaches after the old connection is gone), or another id than
  the private listener it came in on is refused: that connection is closed
  with a logged reason, nothing is sent to it and nobody else is touched.
- With `private_executor_ids`, each of those executors also gets a listening
  socket of its own (listener.private_socket_path), for a sandbox that must
  see no other executor's socket; a connection accepted there can attach only
  as that executor.
- A call frame about a call not dispatched to the connection it came on is
  refused (connection.py): dropped, counted in refused_frames_total, logged.
- Reservations (blockx/core/dispatch/reservations) are the adapter's transport truth about which
  calls occupy a context; bind() refuses when none is free (snapshot.py states
  the capacity rule). Terminal frames release them before the orchestrator
  sees those frames; unbind is idempotent with that release.
- Losing a connection (closed, broken, malformed frame, heartbeat timeout,
  reconnect, adapter close) always goes through _lose(): it unregisters the
  connection, fails pending resume/cancel sends with ExecutorGone, aborts the
  transport and reports on_executor_lost exactly once per attached era. A
  loss is a WARNING, except once the Worker is stopping (``stopping()``, called
  before the pool SIGTERMs the executors, then ``close()``): an orderly stop
  closes every connection on purpose, and says so at INFO.
  check_heartbeat_timeouts() also reports through on_executor_lost; its return
  value only lists the ids for logs and tests."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable

from blockx.protocol import messages

from .connection import NOT_DISPATCHED, ExecutorConnection, encode_execute_call, encode_frame, encode_resume_result
from .counters import counters_for
from .credentials import ExecutorCredentials
from .errors import BindError, CallNotBound, ExecutorGone, OutboxClosed
from .listener import bind_listener, private_socket_path, unlink_if_ours
from .outbox_limits import OUTBOX_DEPTH, OUTBOX_MAX_BATCH
from .snapshot import ExecutorSnapshotData

__all__ = ["ExecutorAdapter", "monotonic_ms"]

EXECUTE_CALL = messages.EXECUTE_CALL
RESUME_CALL = messages.RESUME_CALL


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class _NoHandler:
    """Until the orchestrator sets `handler`: frames are dropped, loudly."""

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger

    def on_executor_attached(self, executor_id: str) -> None:
        self._log.warning("executor %s attached but no handler is set", executor_id)

    def on_executor_frames(self, executor_id: str, frames: list) -> None:
        self._log.warning("dropping %d frames from executor %s: no handler is set",
                          len(frames), executor_id)

    def on_executor_lost(self, executor_id: str, reason: str) -> None:
        pass


class ExecutorAdapter:
    def __init__(
        self,
        socket_path: str,
        *,
        heartbeat_timeout_ms: int = 10000,
        clock_ms: Callable[[], int] = monotonic_ms,
        metrics=None,
        logger: logging.Logger | None = None,
        executor_contexts: int = 0,
        outbox_depth: int = OUTBOX_DEPTH,
        outbox_max_batch: int = OUTBOX_MAX_BATCH,
        backlog: int = 128,
        execute_call_batch: bool = False,
        credentials: ExecutorCredentials | None = None,
        private_executor_ids=(),
    ) -> None:
        if outbox_depth < 1 or outbox_max_batch < 1:
            raise ValueError("outbox_depth and outbox_max_batch must be >= 1")
        if type(executor_contexts) is not int or executor_contexts < 0:
            raise ValueError(f"executor_contexts must be a non-negative integer, got {executor_contexts!r}")
        self.socket_path = os.path.abspath(socket_path)
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        # the --executor-max-inflight every executor was started with (see snapshot.py)
        self.executor_contexts = executor_contexts
        self.clock_ms = clock_ms
        self.counters = counters_for(metrics)
        self.log = logger or logging.getLogger("blockx.executor.adapter")
        self.outbox_depth = outbox_depth
        self.outbox_max_batch = outbox_max_batch
        self.backlog = backlog
        # Send ExecuteCallBatch frames to executors that advertise the feature.
        self.execute_call_batch = execute_call_batch
        self.handler = _NoHandler(self.log)
        # The secrets executors attach with: the pool issues, the connection checks.
        self.credentials = credentials if credentials is not None else ExecutorCredentials()
        self.private_executor_ids = tuple(private_executor_ids)
        self._private: list = []    # (path, identity, server) of the private listeners
        # wedge backstop: replace with PoolManager.kill_executor so kills are
        # counted and the slot restarts; the default kills the peer pid.
        self.kill_hook: Callable[[str], bool] = self._kill_by_pid
        self.loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._identity: tuple[int, int] | None = None
        self._conns: dict[str, ExecutorConnection] = {}  # attached, by executor id
        self._pending: set[ExecutorConnection] = set()  # connected, no Heartbeat yet
        self._closing = False
        # Adapter-local totals. Heartbeat timeouts and wedge kills reach Metrics
        # through the orchestrator, which counts what these calls return.
        self.malformed_total = 0
        self.handler_errors_total = 0
        self.heartbeat_timeouts_total = 0
        self.attach_refused_total = 0
        self.refused_frames_total = 0
        self._refusals_logged = 0   # refused frames are logged a bounded number of times

    # ---- lifecycle ----
    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("ExecutorAdapter already started")
        self.loop = asyncio.get_running_loop()
        self._closing = False
        sock, self._identity = bind_listener(self.socket_path, self.backlog)
        try:
            self._server = await self.loop.create_unix_server(
                lambda: ExecutorConnection(self), sock=sock)
        except BaseException:
            sock.close()
            unlink_if_ours(self.socket_path, self._identity)
            raise
        try:
            for eid in self.private_executor_ids:
                await self._listen_private(eid)
        except BaseException:
            await self.close()
            raise
        self.log.info("executor socket listening on %s", self.socket_path,
                      extra={"fields": {"socket_path": self.socket_path}})

    async def _listen_private(self, executor_id: str) -> None:
        path = private_socket_path(self.socket_path, executor_id)
        sock, identity = bind_listener(path, 4)
        assert self.loop is not None        # start() set it before any private listener
        try:
            server = await self.loop.create_unix_server(
                lambda: ExecutorConnection(self, executor_id), sock=sock)
        except BaseException:
            sock.close()
            unlink_if_ours(path, identity)
            raise
        self._private.append((path, identity, server))

    def stopping(self) -> None:
        """The Worker is shutting down: executors are about to be stopped on purpose,
        so the connections they close are expected (logged at INFO, not WARNING),
        and a connection that arrives from now on is refused."""
        self._closing = True

    @property
    def closing(self) -> bool:
        """``stopping()`` or ``close()`` ran: a lost executor is the stop's doing."""
        return self._closing

    async def close(self) -> None:
        self._closing = True
        server, self._server = self._server, None
        if server is not None:
            server.close()
        private, self._private = self._private, []
        for _path, _identity, pserver in private:
            pserver.close()
        for conn in list(self._conns.values()) + list(self._pending):
            self._lose(conn, "executor adapter closed")
        if server is not None:
            try:
                await asyncio.wait_for(server.wait_closed(), 5.0)
            except asyncio.TimeoutError:
                self.log.warning("executor listener did not close within 5 s")
        for path, identity, pserver in [(self.socket_path, self._identity, None), *private]:
            if pserver is not None:
                try:
                    await asyncio.wait_for(pserver.wait_closed(), 5.0)
                except asyncio.TimeoutError:
                    pass
            try:
                unlink_if_ours(path, identity)
            except OSError as exc:
                self.log.warning("could not remove executor socket %s: %s", path, exc)
        self._identity = None

    # ---- connection bookkeeping (called by ExecutorConnection) ----
    def _connection_made(self, conn: ExecutorConnection) -> None:
        if self._closing:
            conn.closed = True
            conn.outbox.close(ExecutorGone("", "executor adapter closed"))
            conn.transport.abort()
            return
        self._pending.add(conn)

    def _attach_refusal(self, conn: ExecutorConnection, executor_id: str, secret) -> tuple[str, str] | None:
        """Why `conn` may not attach as `executor_id`: (the kind, one of
        ATTACH_REFUSAL_KINDS, for the metric; the message), or None (the secret
        is then spent)."""
        if conn.pinned_id and executor_id != conn.pinned_id:
            return ("private_socket", f"attach as {executor_id!r:.80} on the private socket of "
                                      f"{conn.pinned_id!r}: only that executor attaches there")
        live = self._conns.get(executor_id)
        if live is not None and not live.closed:
            return ("already_attached", f"executor {executor_id!r} is already attached; the live connection stays")
        refused = self.credentials.check(executor_id, secret)
        return None if refused is None else ("credentials", refused)

    def _refuse_attach(self, conn: ExecutorConnection, executor_id: str, refusal: tuple[str, str]) -> None:
        kind, reason = refusal
        self.attach_refused_total += 1
        counts = self.counters.executor_attach_refused
        counts[kind] = counts.get(kind, 0) + 1
        self.log.warning("executor attach refused: %s", reason,
                         extra={"event": "executor_attach_refused",
                                "fields": {"executor_id": executor_id[:80],
                                           "reason": reason, "peer_pid": conn.peer_pid}})
        self._lose(conn, f"attach refused: {reason}")

    def _refuse_frame(self, conn: ExecutorConnection, env: dict) -> None:
        """A call frame about a call not dispatched to `conn`: dropped. Logged the
        first times only (a forger must not be able to flood the log)."""
        self.refused_frames_total += 1
        self.counters.executor_frames_refused += 1
        if self._refusals_logged < 100:
            self._refusals_logged += 1
            call_id = env.get("callId")
            self.log.warning(
                "executor %s sent %s about call %.80r, which was not dispatched to it: refused",
                conn.executor_id, env.get("messageType"), call_id,
                extra={"event": "executor_frame_refused", "fields": {"executor_id": conn.executor_id,
                                  "message_type": env.get("messageType"),
                                  "call_id": str(call_id)[:200], "peer_pid": conn.peer_pid}})

    def _attach(self, conn: ExecutorConnection) -> None:
        eid = conn.executor_id
        self._pending.discard(conn)
        self._conns[eid] = conn
        self.log.info("executor %s attached (pid %d, %d contexts)", eid, self.pid_of(eid) or 0,
                      conn.capacity,
                      extra={"fields": {"executor_id": eid, "pid": self.pid_of(eid) or 0,
                                        "capacity": conn.capacity}})
        try:
            self.handler.on_executor_attached(eid)
        except Exception:
            self._handler_failed("on_executor_attached", eid)

    def _deliver(self, conn: ExecutorConnection, batch: list) -> None:
        try:
            self.handler.on_executor_frames(conn.executor_id, batch)
        except Exception:
            self._handler_failed("on_executor_frames", conn.executor_id)

    def flush_now(self, executor_id: str) -> None:
        """Write the frames queued for `executor_id` now rather than at the next
        loop iteration (Outbox.flush_now): for a handler that answers a read in
        slices. Nothing for an executor not attached."""
        conn = self._conns.get(executor_id)
        if conn is not None:
            conn.outbox.flush_now()

    def _lose(self, conn: ExecutorConnection, reason: str, *, malformed: bool = False) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._pending.discard(conn)
        eid = conn.executor_id
        attached = bool(eid) and self._conns.get(eid) is conn
        if attached:
            del self._conns[eid]
        if malformed:
            self.malformed_total += 1
        dropped = len(conn.reservations)
        conn.reservations.clear()
        if conn.outbox is not None:
            conn.outbox.close(ExecutorGone(eid, reason))
        if conn.transport is not None:
            conn.transport.abort()
        level = logging.WARNING if (attached or malformed) and not self._closing else logging.INFO
        self.log.log(level, "executor %s connection lost: %s", eid or "(not attached)", reason,
                     extra={"fields": {"executor_id": eid, "reason": reason, "malformed": malformed,
                                       "reservations_dropped": dropped, "peer_pid": conn.peer_pid}})
        if attached:
            try:
                self.handler.on_executor_lost(eid, reason)
            except Exception:
                self._handler_failed("on_executor_lost", eid)

    def _handler_failed(self, what: str, executor_id: str) -> None:
        self.handler_errors_total += 1
        self.log.exception("executor handler %s failed for executor %s", what, executor_id)

    # ---- reservations ----
    def _conn_for_bind(self, call_id: str, executor_id: str) -> ExecutorConnection:
        conn = self._conns.get(executor_id)
        if conn is None:
            raise BindError(f"cannot bind call {call_id!r}: executor {executor_id!r} is not attached",
                            call_id=call_id, executor_id=executor_id, reason="executor_unknown")
        res = conn.reservations
        if call_id in res:
            if res.is_draining(call_id):
                raise BindError(
                    f"cannot bind call {call_id!r}: its cancelled attempt is still draining on "
                    f"executor {executor_id!r}", call_id=call_id, executor_id=executor_id,
                    reason="call_draining")
            raise BindError(f"call {call_id!r} already holds a reservation on executor {executor_id!r}",
                            call_id=call_id, executor_id=executor_id, reason="already_bound")
        return conn

    def bind(self, call_id: str, executor_id: str) -> None:
        conn = self._conns.get(executor_id)
        # The per-call path: one folded check-and-reserve; a refusal is explained below.
        if conn is None or not conn.reservations.try_reserve(call_id, conn.capacity):
            self._refuse_bind(call_id, executor_id)

    def _refuse_bind(self, call_id: str, executor_id: str) -> None:
        """Raise the BindError that says why bind() could not reserve."""
        conn = self._conn_for_bind(call_id, executor_id)
        raise BindError(
            f"cannot bind call {call_id!r}: executor {executor_id!r} has no free context "
            f"({len(conn.reservations)} reserved of {conn.capacity})",
            call_id=call_id, executor_id=executor_id, reason="no_context")

    def bind_subcall(self, call_id: str, parent_call_id: str, executor_id: str) -> None:
        """Subcalls always run beside their parent: no capacity check, but the
        parent must hold a live (not draining) reservation on that executor."""
        conn = self._conns.get(executor_id)
        # The per-subcall path: one folded check-and-reserve; a refusal is explained below.
        if conn is None or not conn.reservations.try_reserve_child(call_id, parent_call_id):
            self._refuse_subcall_bind(call_id, parent_call_id, executor_id)

    def _refuse_subcall_bind(self, call_id: str, parent_call_id: str, executor_id: str) -> None:
        """Raise the BindError that says why bind_subcall() could not reserve."""
        res = self._conn_for_bind(call_id, executor_id).reservations
        why = "is draining" if res.is_draining(parent_call_id) else "holds no reservation"
        raise BindError(
            f"cannot bind subcall {call_id!r}: parent call {parent_call_id!r} {why} on "
            f"executor {executor_id!r}", call_id=call_id, executor_id=executor_id,
            reason="parent_draining" if res.is_draining(parent_call_id) else "parent_not_bound")

    def unbind(self, call_id: str, executor_id: str) -> None:
        conn = self._conns.get(executor_id)
        if conn is not None:
            conn.reservations.unbind(call_id)

    def mark_draining(self, call_id: str, executor_id: str) -> None:
        conn = self._conns.get(executor_id)
        if conn is not None:
            conn.reservations.mark_draining(call_id)

    def is_draining(self, call_id: str, executor_id: str) -> bool:
        conn = self._conns.get(executor_id)
        return conn is not None and conn.reservations.is_draining(call_id)

    def is_bound(self, call_id: str, executor_id: str) -> bool:
        conn = self._conns.get(executor_id)
        return conn is not None and call_id in conn.reservations

    # ---- sends ----
    def send_execute_call(self, executor_id: str, call_id: str, payload: dict) -> None:
        """Queue an ExecuteCall; never blocks, and a full outbox paces it rather
        than refusing it (Outbox.push). Raises ExecutorGone, CallNotBound, or the
        codec's FrameTooLarge / TypeError for a payload that cannot be sent."""
        conn = self._execute_conn(executor_id, call_id)
        frame = encode_frame(
            {"messageType": EXECUTE_CALL, "callId": call_id, "requestId": "", "payload": payload})
        self._queue_execute(conn, call_id, payload.get("attemptSeq", 0), frame)

    def send_dispatched_call(self, cmd) -> None:
        """send_execute_call for a dispatcher's DispatchCallCmd as it is (no field
        to add): the same frame, written by the codec from its template without
        building the envelope. Same errors."""
        call_id = cmd.call_id
        conn = self._conns.get(cmd.executor_id)
        # The per-call path: _execute_conn's checks in one step (it explains a refusal).
        if conn is None or conn.reservations.attempt_of(call_id) != NOT_DISPATCHED:
            conn = self._execute_conn(cmd.executor_id, call_id)
        frame = encode_execute_call(call_id, cmd.task_id, cmd.function_id, cmd.digest,
                                    cmd.entry_selector, cmd.args_json, cmd.parent_call_id,
                                    cmd.budget_ms, cmd.attempt_seq)
        self._queue_execute(conn, call_id, cmd.attempt_seq, frame)

    def _execute_conn(self, executor_id: str, call_id: str):
        """The connection of a call bound there and not dispatched yet."""
        conn = self._conns.get(executor_id)
        if conn is None:
            raise ExecutorGone(executor_id)
        res = conn.reservations
        dispatched = res.attempt_of(call_id)
        if dispatched != NOT_DISPATCHED:
            if dispatched is None:
                why = "no reservation (bind it first)"
            elif res.is_draining(call_id):
                why = "it was cancelled and is draining"
            else:
                why = f"attempt {dispatched} was already dispatched (bind again for a new attempt)"
            raise CallNotBound(call_id, executor_id, why)
        return conn

    def _queue_execute(self, conn, call_id: str, attempt_seq: int, frame: bytes) -> None:
        if conn.batch is not None:      # negotiated: a burst leaves as one frame (batch_sender.py)
            conn.batch.add(frame)
            conn.reservations.record_dispatch(call_id, attempt_seq)
            return
        conn.outbox.push(frame)
        conn.reservations.record_dispatch(call_id, attempt_seq)
        counters = self.counters
        counters.uds_frames_out += 1
        counters.uds_bytes_out += len(frame)

    async def _send_waited(self, executor_id: str, frame: bytes) -> None:
        conn = self._conns.get(executor_id)
        if conn is None:
            raise ExecutorGone(executor_id)
        counters = self.counters
        counters.uds_frames_out += 1
        counters.uds_bytes_out += len(frame)
        try:
            await conn.outbox.send(frame)
        except OutboxClosed as exc:
            raise ExecutorGone(executor_id, "connection closed before the frame was written") from exc

    async def send_resume_call(self, executor_id: str, call_id: str, request_id: str,
                               payload: dict, sidecar: bytes | None = None) -> None:
        """Returns once the ResumeCall was handed to the transport (waits for
        outbox room rather than failing). Raises ExecutorGone if the executor is
        or becomes lost first."""
        frame = encode_frame({"messageType": RESUME_CALL, "callId": call_id,
                              "requestId": request_id, "payload": payload}, sidecar)
        await self._send_waited(executor_id, frame)

    def post_resume_call(self, executor_id: str, call_id: str, request_id: str, payload: dict,
                         sidecar: bytes | None, waiter) -> bool:
        """send_resume_call without a Task: queue the ResumeCall now and tell
        `waiter` (set_result(None) once handed to the transport, set_exception
        if the connection closes first; see Outbox.enqueue_notify). Returns
        False, queueing nothing, when the outbox is full: then await
        send_resume_call. Raises ExecutorGone, or the codec's errors."""
        frame = encode_frame({"messageType": RESUME_CALL, "callId": call_id,
                              "requestId": request_id, "payload": payload}, sidecar)
        return self._post_resume(executor_id, frame, waiter)

    def post_resume_result(self, executor_id: str, call_id: str, request_id: str, resume_kind: str,
                           result_json: bytes, budget_used_ms: int, waiter) -> bool:
        """post_resume_call of the payload {"resumeKind": resume_kind, "result":
        result_json (raw JSON), "budgetUsedMs": budget_used_ms} without a sidecar
        (a subcall's output): the same frame, written by the codec from its
        template without building the envelope. Same answers and errors."""
        frame = encode_resume_result(call_id, request_id, resume_kind, result_json, budget_used_ms)
        return self._post_resume(executor_id, frame, waiter)

    def _post_resume(self, executor_id: str, frame: bytes, waiter) -> bool:
        """Queue a ResumeCall frame with its waiter; False, queueing nothing, when
        the executor's outbox is full (the awaiting send waits for room)."""
        conn = self._conns.get(executor_id)
        if conn is None:
            raise ExecutorGone(executor_id)
        outbox = conn.outbox
        if len(outbox) >= outbox.depth:
            return False
        try:
            outbox.enqueue_notify(frame, waiter)
        except OutboxClosed as exc:
            raise ExecutorGone(executor_id, "connection closed before the frame was written") from exc
        counters = self.counters
        counters.uds_frames_out += 1
        counters.uds_bytes_out += len(frame)
        return True

    async def send_cancel_call(self, executor_id: str, call_id: str, reason: str,
                               attempt_seq: int) -> None:
        frame = encode_frame(messages.cancel_call(call_id, attempt_seq, reason))
        await self._send_waited(executor_id, frame)

    # ---- views ----
    def snapshots(self) -> list[ExecutorSnapshotData]:
        out = []
        for eid in sorted(self._conns):
            c = self._conns[eid]
            out.append(ExecutorSnapshotData(
                executor_id=eid, healthy=not c.closed, runnable_count=c.runnable_count,
                inflight_count=c.inflight_count, usable_contexts=c.usable_contexts,
                memory_bytes=c.memory_bytes, heartbeat_seq=c.heartbeat_seq,
                running_call_id=c.running_call_id,
                last_scheduler_active_at_ms=c.scheduler_active_at_ms, pid=c.pid,
                attached_at_ms=c.attached_at_ms, capacity=c.capacity,
                free_contexts=c.free_contexts, reserved_count=len(c.reservations),
                draining_count=c.reservations.draining_count,
                last_heartbeat_at_ms=c.last_heartbeat_at_ms, cpu_user_ms=c.cpu_user_ms,
                cpu_system_ms=c.cpu_system_ms))
        return out

    def executor_ids(self) -> list[str]:
        return sorted(self._conns)

    # ---- resource usage for /metrics and the memory diagnostics ----
    def resource_usage(self) -> list[tuple[str, int, int, int]]:
        """(executor_id, memoryBytes, cpuUserMs, cpuSystemMs) of every attached
        executor, as its latest Heartbeat reported them: the connections own these
        values, nobody keeps a copy. Called from the metrics HTTP thread too:
        list(dict.values()) is one C-level copy under the GIL, retried should the
        loop insert an executor mid-copy; a lost executor is simply absent."""
        for _ in range(3):
            try:
                conns = list(self._conns.values())
                break
            except RuntimeError:
                continue
        else:
            return []
        return sorted((c.executor_id, c.memory_bytes, c.cpu_user_ms, c.cpu_system_ms)
                      for c in conns if not c.closed)

    def healthy_count(self) -> int:
        return len(self._conns)

    def max_outbox_backlog(self) -> int:
        """For Metrics.outbox_depth_fn."""
        return max((len(c.outbox) for c in self._conns.values()), default=0)

    def check_heartbeat_timeouts(self, now_ms: int) -> list[str]:
        """Declare lost every attached executor silent for more than
        heartbeat_timeout_ms (reported via on_executor_lost), and drop
        connections that sent no Heartbeat that long after connecting.
        Returns the executor ids declared lost. A timeout <= 0 disables it."""
        limit = self.heartbeat_timeout_ms
        lost: list[str] = []
        if limit <= 0:
            return lost
        for eid, conn in list(self._conns.items()):
            silent = now_ms - conn.last_heartbeat_at_ms
            if silent > limit:
                lost.append(eid)
                self.heartbeat_timeouts_total += 1
                self._lose(conn, f"heartbeat timeout: no Heartbeat for {silent} ms (limit {limit} ms)")
        for conn in list(self._pending):
            if now_ms - conn.connected_at_ms > limit:
                self._lose(conn, f"no Heartbeat within {limit} ms of connecting")
        return lost

    # ---- killing (wedge backstop) ----
    def pid_of(self, executor_id: str) -> int | None:
        """The executor's process id: the kernel's peer credentials of its
        connection (trustworthy), else the pid its Heartbeat reported."""
        conn = self._conns.get(executor_id)
        if conn is None:
            return None
        return conn.peer_pid or conn.pid or None

    def kill_executor(self, executor_id: str) -> bool:
        return bool(self.kill_hook(executor_id))

    def _kill_by_pid(self, executor_id: str) -> bool:
        pid = self.pid_of(executor_id)
        if not pid or pid == os.getpid():
            return False
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.log.warning("killed executor %s (pid %d)", executor_id, pid)
        return True
