"""DispatchActor: the only code that mutates DispatcherCore.

Invariants:
- DispatcherCore is touched only while the actor runs a step, on the event
  loop: in `_run` (the queue, then the epilogue) and in `run_commands`, which an
  event calls from inside such a step. Every input (executor frames, retry
  timers, phase starts, snapshot syncs, resume outcomes) is a closure
  `fn(now) -> commands` posted with `post`.
- Commands are executed in order. Executing a command may feed an event back
  synchronously where the core expects the answer at once (Bind ->
  handle_executor_bound / handle_bind_failed; a failed ExecuteCall send ->
  handle_call_failed), but never
  re-enters `post`: events posted while a batch executes are queued and run after.
- After the queue drains, the epilogue runs: `dispatch` (admission) then
  `flush_dirty_tasks` (convergence), until both are quiescent. With
  BLOCKX_VALIDATE_STATE=1 (a debug setting) the core's `validate_state()` then
  runs after every batch: a broken invariant is logged at the batch that broke it.
- Anything that awaits (CancelCall sends, IO that awaits, source lookups) runs in
  its own asyncio task and reports back through `post`. ResumeCalls are sent by
  callback (send_resume): queued at once while the outbox has room, their
  outcome reported through `post`; only a full outbox makes one await.
- Frames of one `data_received` chunk are handled as one batch with one epilogue
  (the epilogue's cost is paid once per read, not once per call).
- Work that must not run inside a step (a task's next phase after its Calls
  phase converged) is handed to `after_run`: it runs once the run that asked
  ends (queue drained, epilogue done, `running` off), in the same call stack,
  rather than a loop iteration later; asked outside a run, in the next iteration.

The actor owns its queue, its background sends and its retry timers. It reads
the task runtimes (streaming credits, producers) through the mapping the
Orchestrator owns, and hands a converged Calls phase to ``on_calls_converged``.
"""
from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from typing import Callable, Mapping

import orjson

from blockx.core.dispatch.commands import (
    ArmCallRetry, BatchSettled, BindCall, CancelCallCmd, CompleteCallFromCache, ConvergeTaskCalls,
    DispatchCallCmd, StopCallProduction, SubcallDone, UnbindCall,
)
from blockx._fast import load
from blockx._fast.errors import FrameTooLarge, OutboxClosed, OutboxFull
from blockx.adapters.audit import AUDIT_REJECTED
from blockx.adapters.call_failures import take_child_stack
from blockx.adapters.executor.errors import BindError, CallNotBound, ExecutorGone
from blockx.protocol import messages as m

log = logging.getLogger("blockx.dispatch")

# Each round executes commands that may enable more work; a core that keeps
# answering after this many rounds is looping, and the actor must move on.
EPILOGUE_MAX_ROUNDS = 10_000
ERR_ARGS_TOO_LARGE = "ARGS_TOO_LARGE"   # not retryable: the same args never fit
ERR_SEND_FAILED = "SEND_FAILED"         # not retryable: an unexpected encode/send error
_Fragment = orjson.Fragment
_dumps = orjson.dumps
_writenotice = load("writenotice")
_WrittenLog = _writenotice.WrittenLog
_Notice = _writenotice.Notice


def dumps_kept(value) -> bytes:
    """orjson.dumps for bytes that outlive the event (call outputs, IO cache keys).

    orjson writes into a ~4 KiB malloc'd buffer and shrinks it in place; glibc
    cannot reuse the tail of a shrunk chunk for the next such buffer, so every
    such result that stays alive pins ~4 KiB of heap (a 100k-call task: ~400 MB)
    and each new one faults in fresh pages (~2 us). The copy is byte-identical
    (orjson emits valid UTF-8), lives in pymalloc / a right-sized block, and
    frees the buffer at once: ~0.1 us, ~45 bytes for a small output."""
    return _dumps(value).decode().encode()


class DispatchActor:
    def __init__(self, *, disp, adapter, metrics, runtimes: Mapping, mono: Callable[[], int],
                 on_calls_converged: Callable[[ConvergeTaskCalls], None], audit=None, traces=None,
                 call_spans=None) -> None:
        self.disp = disp
        self.adapter = adapter
        self.metrics = metrics
        self.audit = audit if audit is not None and audit.active else None   # AuditGate; None when off
        self._runtimes = runtimes                 # the Orchestrator's; read here, never changed
        self._mono = mono
        self._on_calls_converged = on_calls_converged
        self._loop = asyncio.get_running_loop()
        self._queue: deque = deque()
        self.running = False
        self._after: deque = deque()              # (fn, args) to run once the current run ends
        self._bg: set[asyncio.Task] = set()
        # The call ids whose ResumeCall was written, taken once per loop iteration (_notice).
        self._written = _WrittenLog(self._schedule_resumed, self._resume_lost)
        self._retry_timers: set[asyncio.TimerHandle] = set()
        self.traces = traces                      # TraceStore (trace_recorder.py); None when tracing is off
        self.call_spans = call_spans              # TaskSpans with per-call spans (otel_spans.py); else None
        # Debug: check the core's invariants after every batch (O(calls) each time).
        self.validate_state = os.environ.get("BLOCKX_VALIDATE_STATE", "") not in ("", "0")

    # ---- the actor -------------------------------------------------------------

    def post(self, fn: Callable[[int], list | None]) -> None:
        self._queue.append(fn)
        if not self.running:
            self._run()

    def _run(self) -> None:
        self.running = True
        q = self._queue
        disp = self.disp
        try:
            while q:
                while q:
                    fn = q.popleft()
                    now = self._mono()
                    try:
                        cmds = fn(now)
                        if cmds:
                            self._exec(cmds, now)
                    except Exception:  # noqa: BLE001 - one bad event must not stop the actor
                        log.exception("dispatch event failed")
                now = self._mono()
                try:
                    for _ in range(EPILOGUE_MAX_ROUNDS):
                        cmds = disp.lifecycle.epilogue(now=now)
                        if not cmds:
                            break
                        self._exec(cmds, now)
                    else:
                        log.error("dispatch epilogue still returned commands after %d rounds; "
                                  "gave up until the next event (a core that never quiesces is a bug)",
                                  EPILOGUE_MAX_ROUNDS)
                except Exception:  # noqa: BLE001 - the actor must outlive one bad command
                    log.exception("dispatch epilogue failed")
                if self.validate_state:
                    try:
                        disp.validate_state()
                    except AssertionError:
                        log.exception("dispatcher state invalid after a batch (BLOCKX_VALIDATE_STATE)")
        finally:
            self.running = False
        after = self._after
        while after and not self.running:   # a callback that posts runs a new step, which drains the rest
            fn, args = after.popleft()
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - one callback's bug must not keep the others from running
                log.exception("dispatch after-run callback failed")

    def after_run(self, fn: Callable, *args) -> None:
        """Run ``fn(*args)`` once the current run of the actor ends (its queue and
        epilogue done), in the same call stack; outside a run, in the next loop
        iteration (as a callback would)."""
        if self.running:
            self._after.append((fn, args))
        else:
            self._loop.call_soon(fn, *args)

    def run_commands(self, cmds: list, now: int) -> None:
        """Carry out commands of the core now, from inside an actor step: for an
        event that answers part of its work before the rest (ExecutorEvents
        applies a long read in slices). A failure is logged, as _run does, so the
        rest of the event still runs."""
        try:
            self._exec(cmds, now)
        except Exception:  # noqa: BLE001 - one bad command must not lose the rest of the read
            log.exception("dispatch commands failed")

    def _exec(self, cmds: list, now: int) -> None:
        disp = self.disp
        adapter = self.adapter
        metrics = self.metrics
        for cmd in cmds:
            t = type(cmd)
            if t is BindCall:
                try:
                    if cmd.is_subcall:
                        adapter.bind_subcall(cmd.call_id, cmd.parent_call_id, cmd.executor_id)
                    else:
                        adapter.bind(cmd.call_id, cmd.executor_id)
                except (BindError, ExecutorGone) as exc:  # no context, executor gone, ...
                    log.debug("bind of %s to %s failed: %s", cmd.call_id, cmd.executor_id, exc)
                    more = disp.lifecycle.handle_bind_failed(cmd.call_id, now)
                except Exception:  # noqa: BLE001 - a bug; roll back so the call is not stuck
                    log.exception("bind of %s to %s raised unexpectedly; treated as a failed bind",
                                  cmd.call_id, cmd.executor_id)
                    more = disp.lifecycle.handle_bind_failed(cmd.call_id, now)
                else:
                    more = disp.lifecycle.handle_executor_bound(cmd.call_id, now, cmd.executor_id)
                    # The common answer is one DispatchCallCmd: send it here, in the
                    # same step, rather than through another pass of this loop.
                    if more and len(more) == 1 and type(more[0]) is DispatchCallCmd:
                        self._execute_call(more[0], now)
                        continue
                if more:
                    self._exec(more, now)
            elif t is UnbindCall:
                adapter.unbind(cmd.call_id, cmd.executor_id)
            elif t is DispatchCallCmd:
                self._execute_call(cmd, now)
            elif t is ConvergeTaskCalls:
                self._on_calls_converged(cmd)
            elif t is CancelCallCmd:
                try:
                    adapter.mark_draining(cmd.call_id, cmd.executor_id)  # a gone executor: no-op
                except Exception:  # noqa: BLE001 - a bug; the rest of the batch must still run
                    log.exception("marking %s draining on %s failed; CancelCall not sent",
                                  cmd.call_id, cmd.executor_id)
                    continue
                self.spawn(self._send_cancel(cmd))
            elif t is ArmCallRetry:
                if cmd.is_retry:            # a failed bind's re-arm consumed no attempt
                    metrics.calls_retried += 1
                if self.traces is not None: self.traces.call_retry(cmd, now)  # trace hook
                self._arm_retry(max(0, cmd.fire_at_ms - now) / 1000.0, cmd.call_id)
            elif t is SubcallDone:
                if cmd.ok:      # the child's output resumes its parent
                    self.send_resume_result(cmd.parent_executor_id, cmd.parent_call_id, cmd.request_id,
                                            cmd.parent_attempt_seq, m.WAIT_SUBCALL,
                                            cmd.output_json or b"null", cmd.budget_used_ms)
                else:
                    self._send_subcall_error(cmd)
            elif t is CompleteCallFromCache:
                metrics.call_cache_hits += 1
            elif t is BatchSettled:
                rt = self._runtimes.get(cmd.task_id)
                if rt is not None and rt.credits is not None:
                    if rt.sink is not None:      # the writer takes the outputs; the credit follows
                        rt.sink.offer(cmd.batch_idx, cmd.outputs, rt.credits.release)
                    else:
                        rt.credits.release()
            elif t is StopCallProduction:
                rt = self._runtimes.get(cmd.task_id)
                if rt is not None and rt.producer is not None and not rt.producer.done():
                    rt.producer.cancel()
            else:  # pragma: no cover - a new command type without a branch is a bug
                log.error("unhandled dispatch command %r", cmd)

    def _execute_call(self, cmd: DispatchCallCmd, now: int) -> None:
        """Send ExecuteCall; a failed send is fed back at once as handle_call_failed."""
        disp = self.disp
        payload = None      # None: the command goes out as it is (send_dispatched_call)
        if self.audit is not None:
            approval, refused = self.audit.check(cmd.function_id, cmd.digest)
            if refused:     # never sent: the code is not approved (AUDIT_MODE=enforce)
                more = disp.lifecycle.handle_call_failed(cmd.call_id, cmd.attempt_seq, AUDIT_REJECTED, False,
                                               refused, now)
                if more:
                    self._exec(more, now)
                return
            if approval:
                payload = {
                    "taskId": cmd.task_id, "functionId": cmd.function_id,
                    "functionCodeDigest": cmd.digest, "entrySelector": cmd.entry_selector,
                    "args": _Fragment(cmd.args_json), "parentCallId": cmd.parent_call_id,
                    "callBudgetMs": cmd.budget_ms, "attemptSeq": cmd.attempt_seq, "audit": approval,
                }
        try:
            if payload is None:
                self.adapter.send_dispatched_call(cmd)
            else:
                self.adapter.send_execute_call(cmd.executor_id, cmd.call_id, payload)
        except OutboxFull as exc:   # the executor adapter paces ExecuteCalls; another adapter may refuse
            more = disp.lifecycle.handle_call_failed(cmd.call_id, cmd.attempt_seq, m.OUTBOX_FULL, True,
                                           f"ExecuteCall to {cmd.executor_id} not sent: {exc}", now)
        except (ExecutorGone, OutboxClosed) as exc:
            more = disp.lifecycle.handle_call_failed(cmd.call_id, cmd.attempt_seq, m.EXECUTOR_LOST, True,
                                           f"ExecuteCall to {cmd.executor_id} not sent: {exc}", now)
        except FrameTooLarge as exc:
            more = disp.lifecycle.handle_call_failed(
                cmd.call_id, cmd.attempt_seq, ERR_ARGS_TOO_LARGE, False,
                f"the call's arguments do not fit in one frame: {exc}", now)
        except CallNotBound as exc:
            # A stale attempt (its reservation was already released): the
            # dispatcher has moved on; nothing to send, nothing to feed back.
            log.debug("ExecuteCall %s skipped: %s", cmd.call_id, exc)
            return
        except Exception as exc:  # noqa: BLE001 - e.g. args the codec cannot encode
            log.exception("ExecuteCall %s to %s failed", cmd.call_id, cmd.executor_id)
            more = disp.lifecycle.handle_call_failed(
                cmd.call_id, cmd.attempt_seq, ERR_SEND_FAILED, False,
                f"ExecuteCall to {cmd.executor_id} could not be sent: {type(exc).__name__}: {exc}",
                now)
        else:
            self.metrics.calls_dispatched += 1
            self.metrics.call_latency.sent(cmd.call_id, cmd.function_id, cmd.attempt_seq, now)
            if self.traces is not None: self.traces.call_sent(cmd)  # trace hook
            if self.call_spans is not None: self.call_spans.call_sent(cmd)  # span hook
            return
        if more:
            self._exec(more, now)

    def _arm_retry(self, delay_s: float, call_id: str) -> None:
        timers = self._retry_timers

        def fire() -> None:
            timers.discard(handle)
            self.post(lambda n: self.disp.lifecycle.handle_retry_ready(call_id, n))

        handle = self._loop.call_later(delay_s, fire)
        timers.add(handle)

    def spawn(self, coro) -> asyncio.Task:
        """Run ``coro`` beside the actor (a send that awaits); cancelled by close()."""
        t = self._loop.create_task(coro)
        self._bg.add(t)
        t.add_done_callback(self._bg.discard)
        return t

    def close(self) -> None:
        """Cancel the background sends and the retry timers (shutdown)."""
        for t in list(self._bg):
            t.cancel()
        for h in list(self._retry_timers):
            h.cancel()
        self._retry_timers.clear()

    # ---- off-actor sends -------------------------------------------------------

    async def _send_cancel(self, cmd: CancelCallCmd) -> None:
        try:
            await self.adapter.send_cancel_call(cmd.executor_id, cmd.call_id, cmd.reason, cmd.attempt_seq)
        except ExecutorGone as exc:  # best effort by contract: its calls end with it
            log.debug("CancelCall %s to %s not sent: %s", cmd.call_id, cmd.executor_id, exc)
        except Exception:  # noqa: BLE001 - a bug
            log.exception("CancelCall %s to %s failed", cmd.call_id, cmd.executor_id)

    def _send_subcall_error(self, cmd: SubcallDone) -> None:
        """Resume the parent of a failed subcall with its error (a child that
        completed resumes it through send_resume_result, from _exec)."""
        payload = {"resumeKind": m.WAIT_SUBCALL,
                   "error": {"errorKind": cmd.error_kind, "errorMessage": cmd.error_message,
                             "retryable": cmd.retryable, "childErrorKind": cmd.child_error_kind,
                             "childErrorStack": take_child_stack(self._runtimes, cmd.child_call_id)},
                   "budgetUsedMs": cmd.budget_used_ms}
        self.send_resume(cmd.parent_executor_id, cmd.parent_call_id, cmd.request_id,
                         cmd.parent_attempt_seq, payload, None)

    def send_resume(self, executor_id: str, call_id: str, request_id: str, attempt_seq: int,
                    payload: dict, sidecar: bytes | None) -> None:
        """Send a ResumeCall by callback, without a Task: queued in the outbox now
        when it has room; once the transport has it, handle_call_resumed is fed
        through `post`. A full outbox falls back to the awaiting `resume`. A send
        that fails synthesizes a retryable RESUME_SEND_FAILED failure of the
        waiting attempt, exactly as `resume` does."""
        if self._posted(self.adapter.post_resume_call, executor_id, call_id, attempt_seq,
                        (executor_id, call_id, request_id, payload, sidecar)) is False:
            self.spawn(self.resume(executor_id, call_id, request_id, attempt_seq, payload, sidecar))

    def send_resume_result(self, executor_id: str, call_id: str, request_id: str, attempt_seq: int,
                           resume_kind: str, result_json: bytes, budget_used_ms: int) -> None:
        """send_resume of {"resumeKind", "result": result_json (raw JSON),
        "budgetUsedMs"} without a sidecar, its frame written from the codec's
        template (adapter.post_resume_result)."""
        # _posted and _notice, unrolled: this is the per-subcall (and per-IO) path.
        waiter = _Notice(self._written, call_id, executor_id, attempt_seq)
        try:
            queued = self.adapter.post_resume_result(executor_id, call_id, request_id, resume_kind,
                                                     result_json, budget_used_ms, waiter)
        except Exception as exc:  # noqa: BLE001 - ExecutorGone, or a result that cannot be encoded
            self._resume_failed(executor_id, call_id, attempt_seq, exc)
            return
        if not queued:
            self.spawn(self.resume(executor_id, call_id, request_id, attempt_seq,
                                   {"resumeKind": resume_kind, "result": _Fragment(result_json),
                                    "budgetUsedMs": budget_used_ms}, None))

    def _posted(self, post: Callable, executor_id: str, call_id: str, attempt_seq: int,
                args: tuple) -> bool | None:
        """post(*args, waiter): True queued, False refused (the outbox is full);
        None when it raised, which is reported as RESUME_SEND_FAILED."""
        waiter = self._notice(executor_id, call_id, attempt_seq)
        try:
            return post(*args, waiter)
        except Exception as exc:  # noqa: BLE001 - ExecutorGone, or a payload that cannot be encoded
            self._resume_failed(executor_id, call_id, attempt_seq, exc)
            return None

    async def resume(self, executor_id: str, call_id: str, request_id: str, attempt_seq: int,
                      payload: dict, sidecar: bytes | None) -> None:
        """Send a ResumeCall, waiting for outbox room; once flushed, feed
        handle_call_resumed, else synthesize a retryable RESUME_SEND_FAILED
        failure of the waiting attempt."""
        try:
            await self.adapter.send_resume_call(executor_id, call_id, request_id, payload, sidecar)
        except Exception as exc:  # noqa: BLE001 - ExecutorGone / OutboxClosed
            self._resume_failed(executor_id, call_id, attempt_seq, exc)
            return
        self.post(lambda n: self.disp.lifecycle.handle_call_resumed(call_id, n))

    def _notice(self, executor_id: str, call_id: str, attempt_seq: int):
        """The waiter of one ResumeCall frame (Outbox.enqueue_notify), a Notice
        in the actor's WrittenLog (blockx/_fast/writenotice*): written ->
        handle_call_resumed; the connection closed first -> RESUME_SEND_FAILED.
        Both run from the next loop iteration, as the awaiting path's Task would
        wake: the executor's loss reported by the same close is applied first,
        and the resumes written by then share one actor run, not one each."""
        return _Notice(self._written, call_id, executor_id, attempt_seq)

    def _schedule_resumed(self) -> None:
        self._loop.call_soon(self._post_resumed)

    def _resume_lost(self, executor_id: str, call_id: str, attempt_seq: int, exc: BaseException) -> None:
        self._loop.call_soon(self._resume_failed, executor_id, call_id, attempt_seq, exc)

    def _post_resumed(self) -> None:
        ids = self._written.take()
        disp = self.disp

        def resumed(now: int) -> list:
            out: list = []
            for call_id in ids:
                cmds = disp.lifecycle.handle_call_resumed(call_id, now)
                if cmds:
                    out.extend(cmds)
            return out

        self.post(resumed)

    def _resume_failed(self, executor_id: str, call_id: str, attempt_seq: int, exc: BaseException) -> None:
        msg = f"ResumeCall to {executor_id} not sent: {exc}"

        def failed(now: int) -> list:
            cmds = self.disp.lifecycle.handle_call_failed(call_id, attempt_seq, m.RESUME_SEND_FAILED,
                                                True, msg, now)
            if cmds:    # accepted: the attempt was still current (see _apply_frames)
                self.metrics.call_failed(m.RESUME_SEND_FAILED)
            return cmds

        self.post(failed)

