"""wire: the TaskUpdate of a terminal snapshot carries exactly result_to_pb's result
(task_update fills it in place; every other reply builds it with result_to_pb)."""
import pytest

from blockx.adapters.grpc import wire
from blockx.core.types import PluginResult, TaskResult, TaskSnapshot, TaskState, TaskStatistic
from blockx.worker.v1 import worker_pb2 as pb

STAT = TaskStatistic(accepted_at_ms=1_700_000_000_000, finished_at_ms=1_700_000_000_123, builder_ms=1,
                     calls_ms=100, plugin_ms=22, call_count=3, calls_failed=1, call_retries=2, cache_hits=1)

RESULTS = [
    TaskResult(TaskState.SUCCEEDED, outputs=[b"2"], statistic=STAT),
    TaskResult(TaskState.SUCCEEDED),                                  # nothing set but the state
    TaskResult(TaskState.SUCCEEDED, outputs=[b"", b"\x00\xff", b"x" * 10_000]),
    TaskResult(TaskState.FAILED, "CALL_FAILED", "add1 raised ValueError: \u00e9", True, [b"1"], [], STAT),
    TaskResult(TaskState.FAILED, "TIMEOUT", "", False),
    TaskResult(TaskState.SUCCEEDED, outputs=[b"1", b"2"], statistic=STAT, plugin_results=[
        PluginResult("tableUpserts", True, "wrote 2 rows", b'{"rows":2}'),
        PluginResult("log", False, "", b""),
    ]),
    TaskResult(TaskState.FAILED, "CALL_FAILED", "call t-1/0 (function f) failed", False, [], [], STAT,
               failure_call_id="t-1/0", failure_traceback="Traceback ...\nValueError: x\n",
               failure_locals=(("x", "1"), ("password", "<redacted>"))),
]


@pytest.mark.parametrize("r", RESULTS, ids=range(len(RESULTS)))
def test_a_terminal_update_carries_exactly_the_result_of_result_to_pb(r):
    snap = TaskSnapshot("t-1", "slot-1", r.state, r)
    upd = wire.task_update(snap)
    want = pb.TaskUpdate(task_id="t-1", state=int(r.state), is_terminal=True, result=wire.result_to_pb(r))
    assert upd == want
    assert upd.SerializeToString(deterministic=True) == want.SerializeToString(deterministic=True)
    assert upd.HasField("result") and upd.result.HasField("statistic")


def test_an_update_before_the_end_has_no_result():
    for state in (TaskState.ALLOCATED, TaskState.RUNNING):
        upd = wire.task_update(TaskSnapshot("t-1", "slot-1", state))
        assert upd == pb.TaskUpdate(task_id="t-1", state=int(state), is_terminal=False)
        assert not upd.HasField("result")
