"""A result too large for one gRPC message: ResultDelivery's exact edges, and a
Session that confines the failure to that task's reply or update."""
import grpc

from blockx.adapters import wire
from blockx.adapters.result_delivery import (ENVELOPE_BYTES, RESULT_TOO_LARGE, WRAP_BYTES, ResultDelivery,
                                             result_bytes)
from blockx.adapters.session import Session
from blockx.core.types import PluginResult, TaskResult, TaskSnapshot, TaskState, TaskStatistic
from blockx.worker.v1 import worker_pb2 as pb

from .test_session import Orch

LIMIT = 64 * 1024


def done(task_id, *outputs, failure=("", ""), plugins=()):
    r = TaskResult(TaskState.SUCCEEDED, failure[0], failure[1], False, list(outputs), list(plugins),
                   TaskStatistic(call_count=len(outputs)))
    return TaskSnapshot(task_id, "slot-0", TaskState.SUCCEEDED, r)


def test_the_constants():
    assert (ENVELOPE_BYTES, WRAP_BYTES, RESULT_TOO_LARGE) == (16 * 1024, 64, "RESULT_TOO_LARGE")
    assert ResultDelivery(LIMIT).fits_bytes == LIMIT - ENVELOPE_BYTES


def test_result_bytes_counts_outputs_failure_message_and_plugin_details():
    snap = done("t", b"a" * 10, b"b" * 5, failure=("X", "m" * 7),
                plugins=[PluginResult("log", True, "ok!", b"d" * 4)])
    assert result_bytes(snap) == 10 + 5 + 7 + 3 + 4
    assert result_bytes(TaskSnapshot("t", "slot-0", TaskState.RUNNING)) == 0


def test_a_result_is_measured_exactly_only_near_the_limit():
    d = ResultDelivery(LIMIT)
    near = done("t", b"x" * (LIMIT - ENVELOPE_BYTES))
    resp = wire.result_response(near)
    assert d.oversize(resp, result_bytes(near)) == 0            # under the slack: not measured
    fits = done("t", b"x" * (LIMIT - WRAP_BYTES - 200))
    resp = wire.result_response(fits)
    assert resp.ByteSize() + WRAP_BYTES <= LIMIT
    assert d.oversize(resp, result_bytes(fits)) == 0
    over = done("t", b"x" * LIMIT)
    resp = wire.result_response(over)
    assert d.oversize(resp, result_bytes(over)) == resp.ByteSize() + WRAP_BYTES > LIMIT


def test_the_message_names_the_size_the_limit_and_the_setting():
    msg = ResultDelivery(LIMIT).message("t1", 70_000)
    assert msg.startswith("the result of task 't1' is 70000 bytes, over the limit of 65536 bytes of one "
                          "gRPC message (grpcMaxMessageBytes (WORKER_GRPC_MAX_MESSAGE_BYTES)), so it cannot "
                          "be delivered; the task itself is unaffected")


def test_an_update_that_fits_is_the_shared_one_and_one_that_does_not_is_a_flagged_copy():
    d = ResultDelivery(LIMIT)
    small = done("s", b"1")
    upd = wire.task_update(small)
    assert d.fit_update(upd, small) is upd
    big = done("b", b"x" * LIMIT, b"y" * 10, plugins=[PluginResult("log", False, "bad", b"z" * 100)])
    upd = wire.task_update(big)
    upd.progress.calls_total = 2
    out = d.fit_update(upd, big)
    assert out is not upd and len(upd.result.outputs) == 2           # the shared update is unchanged
    assert (out.task_id, out.state, out.is_terminal) == ("b", pb.TASK_STATE_SUCCEEDED, True)
    assert list(out.result.outputs) == [] and out.result.failure_code == RESULT_TOO_LARGE
    size = upd.ByteSize() + WRAP_BYTES
    assert out.result.failure_message == d.message("b", size)
    assert out.result.statistic.call_count == 2 and out.progress.calls_total == 2
    assert [(p.plugin, p.ok, p.message, p.details) for p in out.result.plugin_results] == [("log", False, "bad", b"")]
    assert out.ByteSize() < 2048


def test_a_failed_task_keeps_its_own_failure_in_the_message():
    d = ResultDelivery(LIMIT)
    big = done("f", b"x" * LIMIT, failure=("CALL_FAILED", "boom"))
    out = d.fit_update(wire.task_update(big), big)
    assert out.result.failure_code == RESULT_TOO_LARGE
    assert out.result.failure_message.endswith(". The task's own failure was CALL_FAILED: boom")


def session(snaps):
    counted = []
    o = Orch(snaps)
    s = Session(o, wire.TaskUpdateEncoder(), lambda m, c: counted.append((m, c)), delivery=ResultDelivery(LIMIT))
    return s, o, counted


async def test_on_a_session_the_oversized_reply_is_an_error_for_that_request_alone():
    s, _, counted = session({"big": done("big", b"x" * LIMIT), "small": done("small", b"42")})
    s.handle(pb.SessionRequestBatch(requests=[
        pb.SessionRequest(request_id=1, get_result=pb.GetTaskResultRequest(task_id="big")),
        pb.SessionRequest(request_id=2, get_result=pb.GetTaskResultRequest(task_id="small"))]))
    e1, e2 = await s.next_batch()
    assert (e1.request_id, e1.WhichOneof("event"), e1.error.code) == (1, "error", grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
    assert e1.error.message.startswith("the result of task 'big' is ")
    assert (e2.request_id, list(e2.result.result.outputs)) == (2, [b"42"])
    assert counted == [("TaskSession/get_result", "RESOURCE_EXHAUSTED"), ("TaskSession/get_result", "OK")]
    assert s.end is None


async def test_on_a_session_a_watched_task_with_an_oversized_result_arrives_flagged_and_the_watch_goes_on():
    running = {t: TaskSnapshot(t, "slot-0", TaskState.RUNNING) for t in ("big", "small")}
    s, o, _ = session(running)
    s.handle(pb.SessionRequestBatch(requests=[
        pb.SessionRequest(request_id=1, watch=pb.WatchTasksRequest(task_ids=["big", "small"]))]))
    assert len(await s.next_batch()) == 2
    o.subscriptions.publish(done("big", b"x" * LIMIT))
    o.subscriptions.publish(done("small", b"7"))
    evs = await s.next_batch()
    assert [(e.update.task_id, e.update.is_terminal, e.update.result.failure_code, list(e.update.result.outputs))
            for e in evs] == [("big", True, RESULT_TOO_LARGE, []), ("small", True, "", [b"7"])]
    s.eof()
    assert await s.next_batch() is None
