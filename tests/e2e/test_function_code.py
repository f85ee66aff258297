"""Function code by digest: executors fetch source on demand, and a task keeps the
code epoch it pinned at activation across an edit of a function file."""
import time

import pytest

from blockx.worker.v1 import worker_pb2 as pb
from tests.support.worker import outputs

pytestmark = pytest.mark.e2e


def test_epoch_pinning_across_an_edit(start_worker, functions_dir):
    w = start_worker()
    w.submit_calls("t-v1", [("ver", [])])
    assert outputs(w.wait_terminal("t-v1")) == [1]
    # A task pinned to epoch 1 calls `ver` (as a subcall) only after the edit below.
    w.submit_calls("t-pinned", [("ver_later", [1500])])
    time.sleep(0.3)
    (functions_dir / "ver.py").write_text("VERSION = 2\n\n\ndef main():\n    return VERSION\n")
    time.sleep(0.3)
    w.submit_calls("t-v2", [("ver", [])])
    assert outputs(w.wait_terminal("t-v2")) == [2]
    res = w.wait_terminal("t-pinned")
    assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
    assert outputs(res) == [1], "the pinned task must run the code of its own epoch"


def test_new_function_file_is_picked_up(start_worker, functions_dir):
    w = start_worker()
    (functions_dir / "triple.py").write_text("def main(x):\n    return 3 * x\n")
    time.sleep(0.3)
    w.submit_calls("t-new-fn", [("triple", [14])])
    assert outputs(w.wait_terminal("t-new-fn")) == [42]


def test_entry_function_missing(start_worker, functions_dir):
    w = start_worker()
    (functions_dir / "nomain.py").write_text("def helper():\n    return 1\n")
    time.sleep(0.3)
    w.submit_calls("t-nomain", [("nomain", [])])
    res = w.wait_terminal("t-nomain")
    assert res.state == pb.TASK_STATE_FAILED and res.failure_code == "CALL_FAILED"
    assert "main" in res.failure_message
