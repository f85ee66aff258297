"""ExecuteCallBatch end to end: a real worker with EXECUTOR_CALL_BATCH=true and
real executors (which advertise the feature) runs plain calls, subcalls and IO
exactly as with single frames, while fewer frames than ExecuteCalls go out."""
import time

import pytest

from tests.support.worker import outputs

from .test_metrics import _samples, _sum

pytestmark = pytest.mark.e2e

CALLS = [("add", [i, 1]) for i in range(300)] + [("sum_squares", [10]), ("echo_io", [{"k": 1}, "hi"])]
WANT = [i + 1 for i in range(300)] + [285, {"echo": {"k": 1}, "upper": "HI", "bytes": 2, "cached": True}]


def _run(w, task_id):
    deadline = time.monotonic() + 15
    while _samples(w.metrics_text()).get("blockx_executors_healthy") != 2:
        assert time.monotonic() < deadline, "the second executor never attached"
        time.sleep(0.02)
    before = _samples(w.metrics_text())
    w.submit_calls(task_id, CALLS)
    res = w.wait_terminal(task_id)
    after = _samples(w.metrics_text())
    d = lambda name: _sum(after, name) - _sum(before, name)  # noqa: E731
    return res, d('blockx_uds_frames_total{direction="out"}'), d("blockx_calls_dispatched_total")


@pytest.mark.parametrize("batch", ["true", "false"])
def test_batched_and_single_execute_calls_give_the_same_results(start_worker, batch):
    w = start_worker({"EXECUTOR_CALL_BATCH": batch, "IO_DEVSTUB_ENABLED": "true"})
    res, frames_out, dispatched = _run(w, f"batch-{batch}")
    assert outputs(res) == WANT
    assert dispatched == len(CALLS) + 10           # the roots and sum_squares' ten subcalls
    # every ExecuteCall, ResumeCall and HeartbeatAck is a frame of its own, except
    # the ExecuteCalls a batch carries together
    if batch == "true":
        assert frames_out < dispatched
    else:
        assert frames_out >= dispatched
