"""The executor's scheduler: one loop on the main thread (the hub); calls run in
pooled runner greenlets. A runner starts fresh calls back to back, so a call
that returns without calling the SDK pays no greenlet switch or Future of its
own; a call that suspends (sdk.io / call / sleep, a preemption) keeps its
runner until it finishes, and the hub takes another runner for the rest.

Each pass: poll the socket (not at all while calls are runnable, otherwise until
the next timer, at most `idle_poll_ms`), decode and handle every frame that
arrived, fire due timers, run each call that was runnable at the start of the
run phase once, then flush the frames the pass produced with one send.

Capacity: at most `max_inflight` root calls hold a context (admitted: fetching
code, runnable, running or waiting); further ExecuteCalls wait in `pending`, in
arrival order. A subcall whose parent runs here shares its parent's context and
is admitted at once: the Worker binds children to their parent's executor
beyond the per-executor cap, and queueing a child behind parents that wait for
it would deadlock. Heartbeat counts: runnableCount = pending + runnable,
inflightCount = admitted calls, availableContexts = max_inflight - contexts in
use - pending (never below 0).

Function code is fetched once per digest: the first call to need it sends
CallWaiting(function_code); later calls for the digest wait on that fetch. If
the call that asked is cancelled, the next waiter asks again.

Waits: io and subcall go to the Worker (requestId unique in this process);
sleep is a local timer. An io / sleep wait of a call with a budget also arms a
timer at the instant the budget runs out; when it fires the call is resumed
with ABORT and fails BUDGET_EXCEEDED. A subcall wait is charged the child's
budgetUsedMs on resume (the child enforces the granted rest of the budget
itself). A running call's budget is checked at each of its waits, when it
finishes, and, when enabled, by the SIGALRM preemption tick (preempt.py)
while it computes.
Late ResumeCalls (after a cancel or budget abort) are dropped.

CancelCall: a call that has not started is failed CANCELLED at once; a started
one is resumed with ABORT (right away when waiting; it is never running while a
frame is handled, the scheduler being single-threaded) and reports CANCELLED
when its greenlet unwinds. Every ExecuteCall gets exactly one terminal frame
(CallCompleted or CallFailed), which is what releases the Worker's reservation.
An ExecuteCall for a call id still live here supersedes the old attempt (which
is cancelled and still reports its own terminal frame)."""

from __future__ import annotations

import heapq
import logging
import select
import time
from collections import deque
from contextvars import Context

import orjson
from greenlet import getcurrent, greenlet

from blockx._fast.errors import FrameError, FrameTooLarge, ProtocolError
from blockx.protocol import messages as m

from .call import (
    ABORT, CODE_WAIT, DONE, PENDING, READY, RUNNING, WAITING, Call, failed_outcome,
)
from .code_cache import CodeCache, FunctionNotFound, normalize_digest
from .failure import clip, MAX_MESSAGE
from .heartbeat import now_ms
from .sdk import BudgetExceeded, CallCancelled
from .transport import Connection, ConnectionClosed

log = logging.getLogger("blockx_executor")

_monotonic_ns = time.monotonic_ns
_time_ns = time.time_ns
_Fragment = orjson.Fragment
_dumps = orjson.dumps

EXIT_OK = 0
EXIT_PROTOCOL = 2
EXIT_LOST = 3


_IDLE = ("idle",)  # a runner's word to the hub: no call of mine is suspended


def _call_runner(sched):
    """Body of a pooled greenlet: run the fresh calls at the front of the ready
    queue one after another (Scheduler.run_fresh), then park. A call that
    suspends keeps this greenlet: its wait request goes to the hub, and when
    the call is resumed and returns, the same greenlet carries on with the
    fresh calls of that run phase, then parks."""
    hub = sched.hub
    while True:
        sched.run_fresh()
        sched = hub.switch(_IDLE)


class Scheduler:
    def __init__(self, conn: Connection, codec, *, max_inflight: int, max_runnable: int,
                 code_cache_size: int = 256, idle_poll_ms: int = 200):
        self.conn = conn
        self.audited: set[str] = set()   # digests whose audit approval was logged
        self.encode_frame = codec.encode_frame
        self.encode_completed = codec.encode_call_completed   # CallCompleted from a template
        self.encode_waiting_subcall = codec.encode_call_waiting_subcall   # CallWaiting(subcall), too
        self.decoder = codec.FrameDecoder()
        self.max_frame_bytes = codec.MAX_FRAME_BYTES
        self.max_inflight = max_inflight
        self.max_runnable = max_runnable  # advisory: the Worker filters on it
        self.idle_poll_ms = max(1, idle_poll_ms)
        self.hub = getcurrent()
        self.calls: dict[str, Call] = {}
        self.pending: deque[Call] = deque()
        self.ready: deque[Call] = deque()
        self.contexts_in_use = 0
        self.inflight = 0
        self.code = CodeCache(code_cache_size)
        # (callId, requestId) of an outstanding function_code request -> (digest, functionId)
        self.fetches: dict[tuple[str, str], tuple[str, str]] = {}
        self.fetch_waiters: dict[str, list[Call]] = {}
        self.timers: list = []
        self._timer_seq = 0
        self._compact_at = 1024
        self.idle: list = []  # parked call-runner greenlets
        self._run_left = 0     # turns left in the current run phase (run_ready)
        self._digests: dict[str, str] = {}  # functionCodeDigest as sent -> normalized
        self.max_idle = max_inflight
        self._request_seq = 0
        self.running_call_id = ""
        self.running_call: Call | None = None
        self._wall_offset_ns = _time_ns() - _monotonic_ns()   # wall = monotonic + offset (per pass)
        self.last_active_ms = now_ms()

    # ---- stats read by the heartbeat thread -------------------------------------
    def runnable_count(self) -> int:
        return len(self.pending) + len(self.ready)

    def available_contexts(self) -> int:
        return max(0, self.max_inflight - self.contexts_in_use - len(self.pending))

    # ---- the loop ------------------------------------------------------------------
    def loop(self) -> int:
        poller = select.poll()
        poller.register(self.conn.fileno(), select.POLLIN)
        try:
            while True:
                if self.ready:
                    timeout = 0
                elif self.timers:
                    wait_ns = self.timers[0][0] - _monotonic_ns()
                    timeout = min(self.idle_poll_ms, max(0, -(-wait_ns // 1_000_000)))
                else:
                    timeout = self.idle_poll_ms
                events = poller.poll(timeout)
                wall = _time_ns()
                self._wall_offset_ns = wall - _monotonic_ns()
                self.last_active_ms = wall // 1_000_000
                if events:
                    data = self.conn.recv()
                    if data == b"":
                        return self._on_eof()
                    if data:
                        self.handle_frames(self.decoder.feed(data))
                if self.timers:
                    self.fire_timers()
                if self.ready:
                    self.run_ready()
                self.conn.flush()
        except FrameError as exc:
            log.error("malformed frame from the worker, exiting: %s: %s",
                      type(exc).__name__, exc)
            return EXIT_PROTOCOL
        except ProtocolError as exc:
            log.error("message from the worker breaks the UDS contract, exiting: %s", exc)
            return EXIT_PROTOCOL
        except ConnectionClosed as exc:
            if exc.clean:
                log.info("worker closed the connection (%s); exiting", exc)
                return EXIT_OK
            log.error("worker connection lost: %s", exc)
            return EXIT_LOST

    def _on_eof(self) -> int:
        try:
            self.decoder.eof()
        except FrameError as exc:
            log.warning("the worker closed the socket mid-frame: %s", exc)
        if self.inflight or self.pending:
            log.info("worker closed the socket; abandoning %d admitted and %d queued calls",
                     self.inflight, len(self.pending))
        else:
            log.info("worker closed the socket; exiting")
        return EXIT_OK

    # ---- inbound frames --------------------------------------------------------------
    def handle_frames(self, frames: list) -> None:
        fast = m.validate_fast
        validate = m.validate
        accept = m.WORKER_TO_EXECUTOR
        for env, sidecar in frames:
            payload = fast(env, accept)         # the common frames, checked in one call
            if payload is None:
                payload = validate(env, accept)
            mt = env["messageType"]
            if mt == m.EXECUTE_CALL:
                self.on_execute(env["callId"], payload)
            elif mt == m.EXECUTE_CALL_BATCH:
                # Validated whole before any element runs: a bad one ends the connection.
                for item in m.execute_call_batch_items(payload):
                    self.on_execute(item["callId"], item["payload"])
            elif mt == m.RESUME_CALL:
                self.on_resume(env["callId"], env["requestId"], payload, sidecar)
            elif mt == m.CANCEL_CALL:
                self.on_cancel(env["callId"], payload)
            # HeartbeatAck: nothing to do.

    def on_execute(self, call_id: str, p: dict) -> None:
        old = self.calls.get(call_id)
        if old is not None:
            log.warning("ExecuteCall %s attempt %d supersedes attempt %d still live here",
                        call_id, p["attemptSeq"], old.attempt_seq)
            del self.calls[call_id]
            self.abort(old, CallCancelled,
                       f"superseded by attempt {p['attemptSeq']} of the same call")
        parent_id = p["parentCallId"]
        parent = self.calls.get(parent_id) if parent_id else None
        raw = p["functionCodeDigest"]
        digest = self._digests.get(raw)
        if digest is None:
            if len(self._digests) >= 4096:   # digests in use are few; never let odd ones pile up
                self._digests.clear()
            digest = self._digests[raw] = normalize_digest(raw)
        call = Call(self, call_id, p, digest, parent)
        audit = p.get("audit")
        if audit and call.digest not in self.audited:     # the Worker's audit gate approved this code
            self.audited.add(call.digest)
            log.info("running %s digest %s under audit approval %s", call.function_id, call.digest, audit)
        self.calls[call_id] = call
        if parent is None:
            if self.contexts_in_use >= self.max_inflight or self.pending:
                self.pending.append(call)
                return
            self.contexts_in_use += 1
            call.holds_context = True
        self.inflight += 1
        fc = self.code.get(digest)
        if fc is not None:      # admit()'s common case, without its frame or make_ready's
            call.code = fc
            call.state = READY
            call.resume = None
            self.ready.append(call)
        else:
            self.admit(call)

    def admit(self, call: Call) -> None:
        fc = self.code.get(call.digest)
        if fc is not None:
            call.code = fc
            self.make_ready(call, None)
            return
        call.state = CODE_WAIT
        waiters = self.fetch_waiters.get(call.digest)
        if waiters is not None:
            waiters.append(call)
        else:
            self.fetch_waiters[call.digest] = [call]
            self.request_code(call)

    def request_code(self, call: Call) -> None:
        rid = self.next_request_id()
        call.request_id = rid
        self.fetches[(call.call_id, rid)] = (call.digest, call.function_id)
        self.emit(m.call_waiting_function_code(
            call.call_id, rid, call.task_id, call.attempt_seq, call.function_id,
            call.raw_digest))

    def on_resume(self, call_id: str, rid: str, p: dict, sidecar) -> None:
        if self.fetches:    # a code fetch is rare; most resumes answer an io / subcall wait
            fetch = self.fetches.pop((call_id, rid), None)
            if fetch is not None:
                self.on_code(fetch[0], fetch[1], p)
                return
        call = self.calls.get(call_id)
        if call is None or call.state != WAITING or call.request_id != rid:
            log.debug("dropping late ResumeCall %s/%s", call_id, rid)
            return
        if p["resumeKind"] != call.wait_kind:
            log.warning("ResumeCall %s/%s has resumeKind %r for a %r wait", call_id, rid,
                        p["resumeKind"], call.wait_kind)
        if call.wait_kind == "subcall":
            call.used_ns += max(0, p["budgetUsedMs"]) * 1_000_000
        else:
            call.used_ns += _monotonic_ns() - call.wait_start_ns
        # end_wait and make_ready, unrolled: the per-subcall / per-IO path.
        call.wait_kind = None
        call.request_id = ""
        call.timer_token += 1
        error = p.get("error")
        call.state = READY
        call.resume = (True, p["result"], sidecar) if error is None else (False, error, None)
        self.ready.append(call)

    def on_code(self, digest: str, function_id: str, p: dict) -> None:
        waiters = self.fetch_waiters.pop(digest, None) or []
        for call in waiters:
            call.request_id = ""
        error = p.get("error")
        if error is not None:
            message = (f"cannot get the code of function {function_id!r} (digest "
                       f"{digest[:12]}): {error['errorKind']}: {error['errorMessage']}")
            for call in waiters:
                self.finish_without_running(call, "FUNCTION_NOT_FOUND",
                                            bool(error["retryable"]), message)
            return
        result = p["result"]
        try:
            fc = self.code.add(function_id, digest, result["source"],
                               result["functionCodeDigest"])
        except FunctionNotFound as exc:
            log.error("%s", exc)
            for call in waiters:
                self.finish_without_running(call, exc.error_kind, False, str(exc))
            return
        for call in waiters:
            call.code = fc
            self.make_ready(call, None)

    def on_cancel(self, call_id: str, p: dict) -> None:
        call = self.calls.get(call_id)
        if call is None or call.attempt_seq != p["attemptSeq"]:
            log.debug("CancelCall for %s attempt %d: not live here", call_id, p["attemptSeq"])
            return
        reason = p["reason"]
        self.abort(call, CallCancelled,
                   f"call cancelled by the worker: {reason}" if reason
                   else "call cancelled by the worker")

    # ---- state changes -------------------------------------------------------------
    def next_request_id(self) -> str:
        self._request_seq += 1
        return str(self._request_seq)

    def make_ready(self, call: Call, value, front: bool = False) -> None:
        call.state = READY
        call.resume = value
        if front:
            self.ready.appendleft(call)
        else:
            self.ready.append(call)

    def end_wait(self, call: Call) -> None:
        call.wait_kind = None
        call.request_id = ""
        call.timer_token += 1

    def abort(self, call: Call, exc_type: type, message: str) -> None:
        """Stop `call` (budget / cancel). Not started: fail it now. Started: resume
        it with ABORT so its greenlet unwinds and reports."""
        state = call.state
        if state == DONE or call.abort is not None:
            return
        if call.greenlet is None:
            if state == PENDING:
                self.pending.remove(call)
            elif state == CODE_WAIT:
                self._leave_fetch(call)
            elif state == READY:
                self.ready.remove(call)
            self.finish_without_running(call, exc_type.error_kind, False, message)
            return
        call.abort = (exc_type, message)
        if state == WAITING:
            if call.wait_kind != "subcall":
                call.used_ns += _monotonic_ns() - call.wait_start_ns
            self.end_wait(call)
            self.make_ready(call, ABORT, front=True)
        # READY: already queued; the SDK sees `abort` when it resumes.

    def _leave_fetch(self, call: Call) -> None:
        waiters = self.fetch_waiters.get(call.digest)
        if waiters is None:
            return
        if call in waiters:
            waiters.remove(call)
        asked = (call.call_id, call.request_id) in self.fetches
        call.request_id = ""
        if not waiters:
            del self.fetch_waiters[call.digest]
        elif asked:
            # The Worker may not answer for a cancelled call: let the next waiter ask.
            self.request_code(waiters[0])

    # ---- running calls -----------------------------------------------------------------
    def run_ready(self) -> None:
        """Run each call that was runnable when the phase began once. Fresh calls
        run back to back in one pooled runner greenlet (run_fresh): a call that
        returns without suspending costs no greenlet switch of its own, the
        hub switches once into the runner per stretch of fresh calls and the
        runner once back. A resumed call is switched into (its own greenlet)."""
        ready = self.ready
        self._run_left = len(ready)
        while self._run_left and ready:
            call = ready[0]
            g = call.greenlet
            if g is None:
                # Creating a greenlet costs ~10 us, switching into a parked one
                # well under 1 us.
                g = self.idle.pop() if self.idle else greenlet(_call_runner, self.hub)
                value = self
            else:
                ready.popleft()
                self._run_left -= 1
                value = call.resume
                call.resume = None
                call.state = RUNNING
                self.running_call_id = call.call_id
                call.slice_start_ns = _monotonic_ns()
                self.running_call = call
            try:
                result = g.switch(value)
            except BaseException as exc:
                # The runner itself died: MemoryError, or a budget preemption that
                # hit the runner's own code rather than the user's (finish() still
                # reports the abort). Outside a call it is the scheduler's own bug.
                call = self.running_call
                if call is None:
                    raise
                self.end_slice(call)
                self.finish(call, failed_outcome("USER_ERROR", False, clip(
                    f"call runner failed: {type(exc).__name__}: {exc}", MAX_MESSAGE)))
                continue
            if result is _IDLE:
                if not g.dead and len(self.idle) < self.max_idle:
                    self.idle.append(g)
            else:
                call = self.running_call
                self.on_wait(call, result, self.end_slice(call))

    def run_fresh(self) -> None:
        """In a runner greenlet: start the not-yet-started calls at the front of
        the ready queue, while the run phase has turns left. A call that
        suspends switches to the hub from inside `call.run`; this loop goes on
        when that call is resumed and returns."""
        ready = self.ready
        g = getcurrent()
        while self._run_left and ready and ready[0].greenlet is None:
            call = ready.popleft()
            self._run_left -= 1
            call.greenlet = g
            g.blockx_call = call
            call.state = RUNNING
            self.running_call_id = call.call_id
            t0 = call.started_ns = call.slice_start_ns = _monotonic_ns()
            call.started_at_ms = (t0 + self._wall_offset_ns) // 1_000_000
            self.running_call = call
            outcome = Context().run(call.run)  # a fresh Context: nothing leaks into the next call
            self.end_slice(call)
            g.blockx_call = None
            self.finish(call, outcome)

    def end_slice(self, call: Call) -> int:
        """The call stopped running (returned, suspended or died): charge the
        slice to its budget; returns the monotonic instant."""
        self.running_call = None
        t1 = _monotonic_ns()
        self.running_call_id = ""
        self.last_active_ms = (t1 + self._wall_offset_ns) // 1_000_000
        call.used_ns += t1 - call.slice_start_ns
        return t1

    def on_wait(self, call: Call, req: tuple, now: int) -> None:
        kind = req[0]
        call.state = WAITING
        call.wait_start_ns = now
        if kind == "sleep":
            ms = req[1]
            if ms <= 0:
                self.make_ready(call, None)
                return
            call.wait_kind = "sleep"
            wake = now + int(ms * 1_000_000)
            self._arm(call, min(wake, self._budget_deadline(call, now)))
            return
        self._request_seq += 1          # next_request_id, unrolled
        rid = str(self._request_seq)
        call.wait_kind = kind
        call.request_id = rid
        try:
            if kind == "io":
                _, backend, request_json, body = req
                frame = self.encode_frame(m.call_waiting_io(call.call_id, rid, call.task_id, call.attempt_seq,
                                                            backend, _Fragment(request_json)), body)
            else:
                _, function_id, args_json, granted = req
                ancestry = call.wait_ancestry     # the same for each subcall the call asks for
                if ancestry is None:
                    ancestry = call.wait_ancestry = _dumps(call.lineage())
                frame = self.encode_waiting_subcall(call.call_id, rid, call.task_id, call.attempt_seq,
                                                    function_id, args_json, granted, ancestry)
            self.conn.queue(frame)
        except FrameTooLarge as exc:
            self.end_wait(call)
            self.make_ready(call, (False, {"errorKind": "IO_ERROR" if kind == "io" else "SUBCALL_FAILED",
                                           "errorMessage": str(exc), "retryable": False}, None))
            return
        if kind == "io" and call.budget_ns:
            self._arm(call, self._budget_deadline(call, now))

    def _budget_deadline(self, call: Call, now: int) -> int:
        if not call.budget_ns:
            return 1 << 62
        return now + (call.budget_ns - call.used_ns) + 1

    def _arm(self, call: Call, deadline: int) -> None:
        timers = self.timers
        if len(timers) >= self._compact_at:
            # Timers are cancelled lazily (token mismatch); when most entries are
            # stale (IO answered long before the budget ran out) drop them, so the
            # heap and the calls it pins stay proportional to the live waits.
            timers[:] = [t for t in timers if t[3] == t[2].timer_token and t[2].state == WAITING]
            heapq.heapify(timers)
            self._compact_at = max(1024, 2 * len(timers))
        self._timer_seq += 1
        heapq.heappush(timers, (deadline, self._timer_seq, call, call.timer_token))

    def fire_timers(self) -> None:
        timers = self.timers
        now = _monotonic_ns()
        while timers and timers[0][0] <= now:
            _, _, call, token = heapq.heappop(timers)
            if token != call.timer_token or call.state != WAITING:
                continue
            used = call.used_ns + (now - call.wait_start_ns)
            call.used_ns = used
            self.end_wait(call)
            if call.over_budget(used):
                call.abort = (BudgetExceeded, call.budget_message(used))
                self.make_ready(call, ABORT, front=True)
            else:
                self.make_ready(call, None)

    # ---- terminal frames -------------------------------------------------------------
    def _release(self, call: Call) -> None:
        call.state = DONE
        call.greenlet = None
        call.code = None
        call.timer_token += 1
        if self.calls.get(call.call_id) is call:
            del self.calls[call.call_id]
        if call.holds_context:
            call.holds_context = False
            self.contexts_in_use -= 1
        self.inflight -= 1
        pending = self.pending
        while pending and self.contexts_in_use < self.max_inflight:
            nxt = pending.popleft()
            nxt.holds_context = True
            self.contexts_in_use += 1
            self.inflight += 1
            self.admit(nxt)

    def finish_without_running(self, call: Call, kind: str, retryable: bool,
                               message: str) -> None:
        if call.state == PENDING:
            call.state = DONE
            if self.calls.get(call.call_id) is call:
                del self.calls[call.call_id]
        else:
            self._release(call)
        self.emit(m.call_failed(call.call_id, call.task_id, call.attempt_seq, kind, retryable,
                                message, "", {}, 0))

    def finish(self, call: Call, outcome: tuple) -> None:
        self._release(call)
        used_ns = call.used_ns
        used_ms = used_ns // 1_000_000
        if call.abort is not None:
            exc_type, message = call.abort
            stack, local_vars = ("", {}) if outcome[0] == "ok" else (outcome[4], outcome[5])
            outcome = failed_outcome(exc_type.error_kind, False, message, stack, local_vars)
        elif call.budget_ns and used_ns > call.budget_ns:      # call.over_budget(used_ns)
            stack, local_vars = ("", {}) if outcome[0] == "ok" else (outcome[4], outcome[5])
            outcome = failed_outcome(BudgetExceeded.error_kind, False, call.budget_message(used_ns),
                              stack, local_vars)
        if outcome[0] == "ok":
            try:
                self.conn.queue(self.encode_completed(
                    call.call_id, call.task_id, call.attempt_seq, outcome[1], used_ms,
                    call.started_at_ms, (_monotonic_ns() - call.started_ns) // 1_000_000))
                return
            except FrameTooLarge:
                outcome = failed_outcome("OUTPUT_TOO_LARGE", False, (
                    f"output of {call.function_id!r} is {len(outcome[1])} bytes of JSON; "
                    f"a frame holds at most {self.max_frame_bytes} bytes"))
        _, kind, retryable, message, stack, local_vars = outcome
        self.emit(m.call_failed(call.call_id, call.task_id, call.attempt_seq, kind,
                                retryable, message, stack, local_vars, used_ms))

    def emit(self, env: dict) -> None:
        self.conn.queue(self.encode_frame(env))
