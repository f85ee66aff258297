"""Conversion between the public protobuf messages and the core's value types.

Kept in one place so the gRPC handlers stay thin (grpc.aio costs ~0.5 ms per
unary call already; the handlers must add as little as possible)."""
from __future__ import annotations

from blockx.core.errors import InvalidArgumentError
from blockx.core.types import (
    CONTINUE, FAST_FAIL, CallRetryPolicy, FunctionCall, ResultHandler, SubmitTaskRequest,
    TaskResult, TaskSnapshot,
)
from blockx.worker.v1 import worker_pb2 as pb

_POLICY = {
    pb.CALL_FAILURE_POLICY_UNSPECIFIED: FAST_FAIL,
    pb.CALL_FAILURE_POLICY_FAST_FAIL: FAST_FAIL,
    pb.CALL_FAILURE_POLICY_CONTINUE: CONTINUE,
}


def submit_request_from_pb(req: pb.SubmitTaskRequest) -> tuple[SubmitTaskRequest, bool]:
    """(core request, shadow flag). A shadow submission loses its ResultHandler:
    a mirrored task must never write results a second time."""
    t = req.task
    shadow = t.shadow
    fc = FunctionCall(t.function_call.type, t.function_call.payload) if t.HasField("function_call") else None
    rh = None
    if t.HasField("result_handler") and not shadow:
        rh = ResultHandler(t.result_handler.type, t.result_handler.config)
    rp = None
    if t.HasField("call_retry_policy"):
        p = t.call_retry_policy
        rp = CallRetryPolicy(p.max_attempts, p.base_backoff_ms, p.jitter_percent)
    policy = _POLICY.get(t.call_failure_policy)
    if policy is None:
        raise InvalidArgumentError(
            f"task.call_failure_policy {t.call_failure_policy} is not a known CallFailurePolicy "
            "(use CALL_FAILURE_POLICY_FAST_FAIL or CALL_FAILURE_POLICY_CONTINUE)")
    return SubmitTaskRequest(
        task_id=t.task_id, slot_id=req.slot_id, function_call=fc, result_handler=rh,
        task_timeout_ms=t.task_timeout_ms, call_failure_policy=policy,
        call_retry_policy=rp, instance_id=t.instance_id,
    ), shadow


def result_to_pb(r: TaskResult) -> pb.TaskResult:
    s = r.statistic
    out = pb.TaskResult(
        state=int(r.state), failure_code=r.failure_code, failure_message=r.failure_message,
        retryable=r.retryable, outputs=r.outputs, outputs_total=len(r.outputs),
        plugin_results=[pb.PluginResult(plugin=p.plugin, ok=p.ok, message=p.message, details=p.details)
                        for p in r.plugin_results],
        statistic=pb.TaskStatistic(
            accepted_at_ms=s.accepted_at_ms, finished_at_ms=s.finished_at_ms,
            builder_ms=s.builder_ms, calls_ms=s.calls_ms, plugin_ms=s.plugin_ms,
            call_count=s.call_count, calls_failed=s.calls_failed,
            call_retries=s.call_retries, cache_hits=s.cache_hits),
        outputs_written=r.outputs_written,
    )
    if r.failure_call_id:           # only a CALL_FAILED result has them: nothing to pay for otherwise
        out.failure_call_id = r.failure_call_id
        out.failure_traceback = r.failure_traceback
        for n, v in r.failure_locals:
            out.failure_locals.add(name=n, value=v)
    return out


def slot_response(snap: TaskSnapshot) -> pb.RequestTaskSlotResponse:
    out = pb.RequestTaskSlotResponse(task_id=snap.task_id, slot_id=snap.slot_id, state=int(snap.state))
    if snap.result is not None:
        out.result.CopyFrom(result_to_pb(snap.result))
    return out


def submit_response(snap: TaskSnapshot) -> pb.SubmitTaskResponse:
    if snap.result is not None:
        return pb.SubmitTaskResponse(task_id=snap.task_id, state=int(snap.state), result=result_to_pb(snap.result))
    return pb.SubmitTaskResponse(task_id=snap.task_id, state=int(snap.state))


def result_response(snap: TaskSnapshot) -> pb.GetTaskResultResponse:
    if snap.result is not None:
        return pb.GetTaskResultResponse(task_id=snap.task_id, state=int(snap.state), result=result_to_pb(snap.result))
    return pb.GetTaskResultResponse(task_id=snap.task_id, state=int(snap.state))


def task_update(snap: TaskSnapshot) -> pb.TaskUpdate:
    r = snap.result
    if r is not None and snap.state >= 3:
        # The result is filled in place: a result= argument would build it and then copy it.
        upd = pb.TaskUpdate(task_id=snap.task_id, state=int(snap.state), is_terminal=True)
        _fill_result(upd.result, r)
        return upd
    return pb.TaskUpdate(task_id=snap.task_id, state=int(snap.state), is_terminal=False)


def _fill_result(out: pb.TaskResult, r: TaskResult) -> None:
    """``out`` (an empty pb.TaskResult) becomes what result_to_pb(r) returns."""
    s = r.statistic
    out.state = int(r.state)
    if r.failure_code:
        out.failure_code = r.failure_code
    if r.failure_message:
        out.failure_message = r.failure_message
    if r.retryable:
        out.retryable = True
    if r.outputs:
        out.outputs.extend(r.outputs)
        out.outputs_total = len(r.outputs)
    if r.outputs_written:
        out.outputs_written = r.outputs_written
    for p in r.plugin_results:
        out.plugin_results.add(plugin=p.plugin, ok=p.ok, message=p.message, details=p.details)
    if r.failure_call_id:
        out.failure_call_id = r.failure_call_id
        out.failure_traceback = r.failure_traceback
        for n, v in r.failure_locals:
            out.failure_locals.add(name=n, value=v)
    # Field by field into the message itself: a TaskStatistic built and merged costs
    # about 16,000 instructions, these nine stores about 11,700 (the bytes are the same).
    st = out.statistic
    st.accepted_at_ms = s.accepted_at_ms
    st.finished_at_ms = s.finished_at_ms
    st.builder_ms = s.builder_ms
    st.calls_ms = s.calls_ms
    st.plugin_ms = s.plugin_ms
    st.call_count = s.call_count
    st.calls_failed = s.calls_failed
    st.call_retries = s.call_retries
    st.cache_hits = s.cache_hits


class TaskUpdateEncoder:
    """A snapshot is delivered to each of its subscribers in a row: build its
    TaskUpdate (with the result, the costly part) once for all of them.
    ``progress_of(snap)`` (ProgressTicker.progress_of) gives the TaskProgress
    counts to attach, or None."""
    __slots__ = ("_snap", "_update", "_progress_of")

    def __init__(self, progress_of=None) -> None:
        self._snap: TaskSnapshot | None = None
        self._update: pb.TaskUpdate | None = None
        self._progress_of = progress_of

    def __call__(self, snap: TaskSnapshot) -> pb.TaskUpdate:
        if snap is not self._snap:
            upd = task_update(snap)
            if self._progress_of is not None:
                p = self._progress_of(snap)
                if p is not None:
                    pr = upd.progress
                    pr.calls_total, pr.calls_done, pr.calls_failed, pr.calls_retried = p
            self._update = upd
            self._snap = snap
            return upd
        assert self._update is not None          # built with self._snap
        return self._update
