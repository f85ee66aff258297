"""ExecutorEvents: what the executors say, turned into dispatcher events.

It is the ExecutorAdapter's handler. Frames of one chunk become one event on
the dispatch actor (one epilogue); a call's waits are served here: function
code from the asking task's pinned epoch only, IO through the task's IO scope,
subcalls through the dispatcher. ResumeCalls go out by callback
(``actor.send_resume``); an IO the scope answers synchronously (cache hit, a
backend that needs no await) is resumed without a Task. Anything that awaits
runs beside the actor (``actor.spawn``) and reports back through ``actor.post``. Attach and loss of an
executor go to the Orchestrator (snapshot sync, readiness).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable, Mapping

import orjson

from blockx.adapters.call_failures import note_call_failed
from blockx.adapters.dispatch_actor import DispatchActor, dumps_kept
from blockx.core.call_ids import task_id_of_call
from blockx.log_event import log_event
from blockx.protocol import messages as m
from blockx.tenant_view import tenant_message

log = logging.getLogger("blockx.dispatch")
_Fragment = orjson.Fragment
_dumps = orjson.dumps


# Frames of one read applied at a time before their answers are written (_apply_frames).
# Measured on (d) subcalls, alternating rounds of 10 tasks in one Worker: the whole
# read 41-64k subcalls/s by median, slices of 16 49-89k; 8 and 32 no better than 16.
# (a) is unchanged (its roots are dispatched by the epilogue, once per read).
ANSWER_SLICE = 16


def _own_task(p: dict, call_id: str) -> dict:
    """The payload of a terminal frame for the trace hook, naming the call's own task:
    the executor chose its taskId, which must not file the event under another task."""
    tid = task_id_of_call(call_id)
    return p if p.get("taskId") == tid else {**p, "taskId": tid}


class ExecutorEvents:
    def __init__(self, *, actor: DispatchActor, runtimes: Mapping, canonical_args: Callable[[object], bytes],
                 on_attached: Callable[[str], None], snapshots: Callable[[], list],
                 limit_kill_reason: Callable[[str], str | None] = lambda executor_id: None,
                 answer_slice: int = ANSWER_SLICE) -> None:
        if type(answer_slice) is not int or answer_slice < 0:
            raise ValueError(f"answer_slice must be a non-negative integer, got {answer_slice!r}")
        self.actor = actor
        self.disp = actor.disp
        self.adapter = actor.adapter
        self.metrics = actor.metrics
        self._runtimes = runtimes                 # the Orchestrator's; read here, never changed
        self._canonical_args = canonical_args
        self._on_attached = on_attached
        self._snapshots = snapshots
        self._limit_kill_reason = limit_kill_reason     # the pool's word on a sandbox limit kill
        self.traces = actor.traces                # TraceStore; None when tracing is off
        self.call_spans = actor.call_spans        # TaskSpans with per-call spans; None when off
        self.answer_slice = answer_slice          # 0: a read is applied whole

    # ---- ExecutorAdapter handler ----------------------------------------------

    def on_executor_attached(self, executor_id: str) -> None:
        self._on_attached(executor_id)

    def on_executor_lost(self, executor_id: str, reason: str) -> None:
        # A sandbox limit that killed it (read from its cgroup, which knows before
        # the exit is reaped) goes into the failed calls' message.
        detail = self._limit_kill_reason(executor_id)
        detail = f"killed by its {detail}" if detail else ""
        # an orderly stop ends every executor on purpose: INFO then, not an alarm
        level = logging.INFO if getattr(self.adapter, "closing", False) else logging.WARNING
        log.log(level, "executor %s lost: %s%s", executor_id, reason, f" ({detail})" if detail else "")
        if self.traces is not None: self.traces.executor_lost(executor_id, detail or reason)  # trace hook
        snaps = self._snapshots()
        self.actor.post(lambda n: self._apply_executor_lost(executor_id, snaps, n, detail))

    def _apply_executor_lost(self, executor_id: str, snaps: list, now: int, detail: str = "") -> list:
        # Its in-flight attempts end here, not with a frame: count them as failed so
        # that dispatched == completed + failed holds in the metrics.
        calls = self.disp.executors.call_ids(executor_id)
        self.metrics.call_latency.forget(calls)
        lost = len(calls)
        if lost:
            self.metrics.call_failed(m.EXECUTOR_LOST, lost)
        return ((self.disp.lifecycle.handle_executor_snapshot_updated(snaps, now=now) or [])
                + (self.disp.lifecycle.handle_executor_lost(executor_id, now=now, detail=detail) or []))

    def on_executor_frames(self, executor_id: str, frames: list) -> None:
        self.actor.post(lambda now: self._apply_frames(executor_id, frames, now))

    def _apply_frames(self, executor_id: str, frames: list, now: int) -> list | None:
        """The frames of one read. A read longer than `answer_slice` is applied a
        slice at a time: each slice's commands run at once and what they queued
        for this executor is written (ExecutorAdapter.flush_now) before the next
        slice. In a lock-step exchange (a batch of subcall waits answered with
        their children, children's completions with their parents' resumes) the
        executor starts on the first answers while the rest of the read is
        applied. The epilogue (dispatching roots, settling tasks) still runs
        once, after the whole read, and the last slice's answers leave with the
        loop iteration's flush, coalesced with the rest as before."""
        step = self.answer_slice
        n = len(frames)
        if not step or n <= step:
            return self._apply_slice(executor_id, frames, now)
        actor, adapter = self.actor, self.adapter
        for i in range(0, n, step):
            cmds = self._apply_slice(executor_id, frames[i:i + step], now)
            if i + step >= n:
                return cmds         # the last slice's commands: run by the actor, as for a short read
            if cmds:
                actor.run_commands(cmds, now)
            adapter.flush_now(executor_id)
        return None             # not reached: the last slice returns above

    def _apply_slice(self, executor_id: str, frames: list, now: int) -> list | None:
        disp = self.disp
        metrics = self.metrics
        out: list = []
        for env, sidecar in frames:
            mt = env.get("messageType")
            p = env.get("payload")
            if not isinstance(p, dict):
                log.warning("executor %s sent %s without a payload object", executor_id, mt)
                continue
            call_id = env.get("callId", "")
            try:
                # Counted only when the core accepted the frame (its answer is
                # non-empty): a duplicated or stale frame changes nothing.
                if mt == "CallCompleted":
                    # dumps_kept(output), unrolled on the per-call path: see dumps_kept for the copy.
                    cmds = disp.lifecycle.handle_call_completed(call_id, p["attemptSeq"],
                                                      _dumps(p.get("output")).decode().encode(),
                                                      p.get("budgetUsedMs", 0), now)
                    metrics.call_latency.ended(call_id, p["attemptSeq"], now, bool(cmds))
                    if cmds:
                        metrics.calls_completed += 1
                        if self.traces is not None: self.traces.call_done(_own_task(p, call_id), call_id, executor_id, "")  # trace hook
                        if self.call_spans is not None: self.call_spans.call_done(call_id, "")  # span hook
                elif mt == "CallFailed":
                    kind = p.get("errorKind", "")
                    cmds = disp.lifecycle.handle_call_failed(call_id, p["attemptSeq"], kind, bool(p.get("retryable")),
                                                   p.get("errorMessage", ""), now, p.get("budgetUsedMs", 0))
                    metrics.call_latency.ended(call_id, p["attemptSeq"], now, bool(cmds))
                    if cmds:
                        if p.get("errorStack") or p.get("localVars"):    # where it failed: call_failures
                            note_call_failed(self._runtimes.get(task_id_of_call(call_id)), call_id, p,
                                             disp.tasks.call_state(call_id) != "READY")
                        metrics.call_failed(kind)
                        if self.traces is not None: self.traces.call_done(_own_task(p, call_id), call_id, executor_id, kind or "FAILED")  # trace hook
                        if self.call_spans is not None: self.call_spans.call_done(call_id, kind or "FAILED")  # span hook
                elif mt == "CallWaiting":
                    # A wait is served in the name of the task its call belongs to (read from
                    # the call id exactly: core.call_ids): a call cannot ask IO, code or
                    # subcalls of another, not even of a task whose id prefixes its own.
                    tid = p.get("taskId", "")
                    if task_id_of_call(call_id) != tid:
                        log.warning("executor %s sent CallWaiting for call %.80r in the name of task %.80r: "
                                    "refused", executor_id, call_id, tid)
                        continue
                    if p.get("waitKind") == "subcall":     # the hottest wait: no _on_call_waiting frame
                        cmds = self._on_subcall_request(self._runtimes.get(p.get("taskId", "")), executor_id,
                                                        call_id, env.get("requestId", ""),
                                                        p.get("attemptSeq", 0), p, now)
                    else:
                        cmds = self._on_call_waiting(executor_id, call_id, env.get("requestId", ""), p,
                                                     sidecar, now)
                else:
                    log.warning("executor %s sent unexpected %r", executor_id, mt)
                    continue
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("executor %s sent a malformed %s for %s: %s", executor_id, mt, call_id, exc)
                continue
            if cmds:
                out.extend(cmds)
        return out

    def _on_call_waiting(self, executor_id: str, call_id: str, request_id: str, p: dict,
                         sidecar: bytes | None, now: int) -> list | None:
        kind = p["waitKind"]
        attempt = p.get("attemptSeq", 0)
        if kind == m.WAIT_FUNCTION_CODE:
            # Does not change dispatcher state: answer straight from the code view.
            self.actor.spawn(self._serve_function_code(executor_id, call_id, request_id, p))
            return None
        rt = self._runtimes.get(p.get("taskId", ""))
        if kind == m.WAIT_IO:
            cmds = self.disp.lifecycle.handle_call_waiting(call_id, attempt, now)
            if self.traces is not None: self.traces.io_wait(p, call_id, attempt)  # trace hook
            if rt is None or rt.io_scope is None:
                self.actor.send_resume(executor_id, call_id, request_id, attempt, {
                    "resumeKind": m.WAIT_IO, "error": {
                        "errorKind": m.IO_ERROR, "retryable": False,
                        "errorMessage": f"task {p.get('taskId')!r} has no open IO scope (it ended)"}}, None)
            else:
                self._serve_io_now(rt, executor_id, call_id, request_id, attempt, p, sidecar)
            return cmds
        if kind == m.WAIT_SUBCALL:
            return self._on_subcall_request(rt, executor_id, call_id, request_id, attempt, p, now)
        raise ValueError(f"unknown waitKind {kind!r}")

    def _on_subcall_request(self, rt, executor_id, call_id, request_id, attempt, p, now):
        disp = self.disp
        cmds = disp.lifecycle.handle_call_waiting(call_id, attempt, now)
        function_id = p["functionId"]
        error = None
        if rt is None or rt.view is None:
            error = (m.SUBCALL_FAILED, f"task {p.get('taskId')!r} is not running", False)
        else:
            try:
                digest, _entry = rt.view.resolve(function_id)
            except Exception as exc:  # FunctionNotFound
                # the function's own code reads this error: no server path or function list in it
                log_event(log, "subcall_function_not_found", logging.INFO, task_id=p.get("taskId"),
                          call_id=call_id, message=str(exc))
                error = (m.FUNCTION_NOT_FOUND, tenant_message(str(exc)), False)
        if error is None:
            args_json = self._canonical_args(p.get("args", []))
            child, more = disp.lifecycle.add_subcall(call_id, executor_id, request_id, function_id, digest, args_json,
                                           int(p.get("grantedBudgetMs", 0)), now)
            if isinstance(child, str):
                if self.traces is not None: self.traces.subcall(p.get("taskId"), call_id, child)  # trace hook
                return cmds + more if cmds else more
            if child.stale:
                return cmds        # from an attempt that is no longer current: nobody waits for it
            error = (child.error_kind, child.message, child.retryable)
        kind, message, retryable = error
        self.actor.send_resume(executor_id, call_id, request_id, attempt, {
            "resumeKind": m.WAIT_SUBCALL,
            "error": {"errorKind": kind, "errorMessage": message, "retryable": retryable},
            "budgetUsedMs": 0}, None)
        return cmds

    async def _serve_function_code(self, executor_id, call_id, request_id, p) -> None:
        """Only code of the asking task's pinned epoch is served to its calls."""
        digest = p.get("functionCodeDigest", "")
        rt = self._runtimes.get(p.get("taskId", ""))
        try:
            if rt is None or rt.view is None:
                raise LookupError(f"task {p.get('taskId')!r} is not running")
            source = rt.view.source_for(digest)
            payload = {"resumeKind": m.WAIT_FUNCTION_CODE,
                       "result": {"source": source, "functionCodeDigest": digest}, "budgetUsedMs": 0}
        except Exception as exc:  # noqa: BLE001 - unknown digest: the executor fails the call
            payload = {"resumeKind": m.WAIT_FUNCTION_CODE, "error": {
                "errorKind": m.FUNCTION_NOT_FOUND, "retryable": False,
                "errorMessage": f"no source for function {p.get('functionId')!r} digest {digest}: {exc}"},
                "budgetUsedMs": 0}
        try:
            await self.adapter.send_resume_call(executor_id, call_id, request_id, payload, None)
        except Exception as exc:  # noqa: BLE001 - the executor went away; its calls fail as lost
            log.debug("function code resume to %s failed: %s", executor_id, exc)

    def _serve_io_now(self, rt, executor_id, call_id, request_id, attempt, p, sidecar) -> None:
        """An IO the task's scope can answer without awaiting (a cached result,
        a backend that completes synchronously) is resumed right here, without a
        Task; any other awaits in `_serve_io`."""
        request_json = dumps_kept(p.get("request"))  # the task's IO cache keeps it
        try:
            got = rt.io_scope.handle_now(p.get("backend", ""), request_json, sidecar)
        except Exception as exc:  # noqa: BLE001 - any IO failure goes back to the call
            self._resume_io(rt, executor_id, call_id, request_id, attempt, _io_error_payload(exc), None)
            return
        if got is None:
            self.actor.spawn(self._serve_io(rt, executor_id, call_id, request_id, attempt, p, sidecar,
                                            request_json))
            return
        result_json, body = got
        self._resume_io(rt, executor_id, call_id, request_id, attempt,
                        {"resumeKind": m.WAIT_IO, "result": _Fragment(result_json), "budgetUsedMs": 0}, body)

    async def _serve_io(self, rt, executor_id, call_id, request_id, attempt, p, sidecar,
                        request_json: bytes | None = None) -> None:
        try:
            if request_json is None:
                request_json = dumps_kept(p.get("request"))  # the task's IO cache keeps it
            result_json, body = await rt.io_scope.handle(p.get("backend", ""), request_json, sidecar)
            payload = {"resumeKind": m.WAIT_IO, "result": _Fragment(result_json), "budgetUsedMs": 0}
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any IO failure goes back to the call
            payload = _io_error_payload(exc)
            body = None
        self._resume_io(rt, executor_id, call_id, request_id, attempt, payload, body)

    def _resume_io(self, rt, executor_id, call_id, request_id, attempt, payload, body) -> None:
        if self.traces is not None: self.traces.io_done(rt.task_id, call_id, "error" not in payload)  # trace hook
        self.actor.send_resume(executor_id, call_id, request_id, attempt, payload, body)


def _io_error_payload(exc: Exception) -> dict:
    to_err = getattr(exc, "to_resume_error", None)
    error = to_err() if to_err else {"errorKind": m.IO_ERROR, "retryable": False,
                                     "errorMessage": f"{type(exc).__name__}: {exc}"}
    return {"resumeKind": m.WAIT_IO, "error": error, "budgetUsedMs": 0}
