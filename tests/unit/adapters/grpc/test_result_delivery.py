"""A reply too large for one gRPC message: ResultDelivery's exact edges (how a
page that would pass it is refused, and a Session that pages, are in
test_result_pages)."""
from blockx.adapters.grpc import wire
from blockx.adapters.grpc.result_delivery import ENVELOPE_BYTES, RESULT_TOO_LARGE, WRAP_BYTES, ResultDelivery, result_bytes
from blockx.core.types import PluginResult, TaskResult, TaskSnapshot, TaskState, TaskStatistic

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
