"""Function code by digest: executors fetch source on demand, and a task keeps the
code epoch it pinned at activation across an edit of a function file."""
import time

import pytest

from blockx.worker.v1 import worker_pb2 as pb
from tests.support.worker import outputs

pytestmark = pytest.mark.e2e


def _first_task_that(w, prefix: str, calls, ok, timeout: float = 5.0):
    """Submit fresh tasks until one's result satisfies `ok`: the functions directory
    is rescanned on activation at most once per 100 ms, so an edit shows up in a
    task activated shortly after it, not necessarily the very next one."""
    deadline = time.monotonic() + timeout
    for i in range(1000):
        res = w.wait_terminal(w.submit_calls(f"{prefix}-{i}", calls).task_id)
        if ok(res):
            return res
        assert time.monotonic() < deadline, f"no task saw the edit; the last one: {res.failure_message}"
        time.sleep(0.05)
    raise AssertionError("unreachable")


def _calls_dispatched(w) -> float:
    for line in w.metrics_text().splitlines():
        if line.startswith("blockx_calls_dispatched_total "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _until(cond, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_epoch_pinning_across_an_edit(start_worker, functions_dir):
    w = start_worker()
    w.submit_calls("t-v1", [("ver", [])])
    assert outputs(w.wait_terminal("t-v1")) == [1]
    # A task pinned to epoch 1 calls `ver` (as a subcall) only after the edit below.
    w.submit_calls("t-pinned", [("ver_later", [1500])])
    # Its call is dispatched only after activation pinned epoch 1.
    _until(lambda: _calls_dispatched(w) == 2, "t-pinned's call to be dispatched")
    (functions_dir / "ver.py").write_text("VERSION = 2\n\n\ndef main():\n    return VERSION\n")
    _first_task_that(w, "t-v2", [("ver", [])], lambda r: outputs(r) == [2])
    res = w.wait_terminal("t-pinned")
    assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
    assert outputs(res) == [1], "the pinned task must run the code of its own epoch"


def test_new_function_file_is_picked_up(start_worker, functions_dir):
    w = start_worker()
    (functions_dir / "triple.py").write_text("def main(x):\n    return 3 * x\n")
    res = _first_task_that(w, "t-new-fn", [("triple", [14])], lambda r: r.state == pb.TASK_STATE_SUCCEEDED)
    assert outputs(res) == [42]


def test_entry_function_missing(start_worker, functions_dir):
    w = start_worker()
    (functions_dir / "nomain.py").write_text("def helper():\n    return 1\n")
    res = _first_task_that(w, "t-nomain", [("nomain", [])], lambda r: "not found in code epoch" not in r.failure_message)
    assert res.state == pb.TASK_STATE_FAILED and res.failure_code == "CALL_FAILED"
    assert "has no entry point 'main'" in res.failure_message
