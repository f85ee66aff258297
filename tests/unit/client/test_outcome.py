"""TaskOutcome.result(): the outputs, TaskFailed (its str() the failure with the
remote traceback and locals) or, for a task still running, a RuntimeError."""
import pytest

from blockx.client import BlockxError, TaskFailed, TaskOutcome
from blockx.worker.v1 import worker_pb2 as pb

TB = "Traceback (most recent call last):\n  File \"<blockx-fn f@1>\", line 2, in main\nValueError: x\n"


def _failed() -> TaskOutcome:
    r = pb.TaskResult(state=pb.TASK_STATE_FAILED, failure_code="CALL_FAILED",
                      failure_message="call t/0 (function f) failed after 1 attempt(s): USER_ERROR: ValueError: x",
                      failure_call_id="t/0", failure_traceback=TB,
                      failure_locals=[pb.LocalVariable(name="x", value="1"),
                                      pb.LocalVariable(name="api_token", value="<redacted>")])
    return TaskOutcome.from_pb("t", pb.TASK_STATE_FAILED, r, "127.0.0.1:8081")


def test_a_failed_outcome_raises_task_failed_that_reads_like_a_local_exception():
    outcome = _failed()
    assert outcome.failure_locals == {"x": "1", "api_token": "<redacted>"}
    with pytest.raises(TaskFailed) as info:
        outcome.result()
    err = info.value
    assert not isinstance(err, BlockxError)            # not a refusal: the task ran and failed
    assert err.outcome is outcome and err.call_id == "t/0" and err.remote_traceback == TB
    assert str(err) == (
        "task t failed: CALL_FAILED: call t/0 (function f) failed after 1 attempt(s): USER_ERROR: ValueError: x"
        "\n\nRemote traceback (call t/0 on 127.0.0.1:8081):\n" + TB.rstrip("\n")
        + "\n\nLocal variables of the innermost user frame:\n  x         = 1\n  api_token = <redacted>")


def test_without_a_traceback_the_message_is_the_failure_alone():
    r = pb.TaskResult(state=pb.TASK_STATE_FAILED, failure_code="TIMED_OUT", failure_message="over 100 ms")
    with pytest.raises(TaskFailed) as info:
        TaskOutcome.from_pb("t", pb.TASK_STATE_FAILED, r, "w").result()
    assert str(info.value) == "task t failed: TIMED_OUT: over 100 ms"


def test_succeeded_returns_the_outputs_and_running_is_not_an_answer():
    r = pb.TaskResult(state=pb.TASK_STATE_SUCCEEDED, outputs=[b"3", b'{"k":1}'])
    assert TaskOutcome.from_pb("t", pb.TASK_STATE_SUCCEEDED, r, "w").result() == [3, {"k": 1}]
    with pytest.raises(RuntimeError, match="task t is RUNNING, not finished"):
        TaskOutcome.from_pb("t", pb.TASK_STATE_RUNNING, None, "w").result()
