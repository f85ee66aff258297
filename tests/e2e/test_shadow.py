"""Shadow forwarding between two real workers."""
import time

import grpc
import pytest

from blockx.worker.v1 import worker_pb2 as pb
from tests.support.worker import outputs

pytestmark = pytest.mark.e2e


def test_shadow_copy_runs_on_the_target_without_its_result_handler(start_worker):
    target = start_worker()
    primary = start_worker({"SHADOW_SUBMIT_TARGET_ADDR": f"127.0.0.1:{target.port}",
                            "SHADOW_SUBMIT_SAMPLE_RATE": "1.0"}, profile="dev")  # `test` is a dev stub
    primary.submit_calls("t-shadow", [("add", [20, 22])], result_handler=("test", {}))
    res = primary.wait_terminal("t-shadow")
    assert outputs(res) == [42] and [p.plugin for p in res.plugin_results] == ["test"]
    deadline = time.monotonic() + 10
    while True:
        try:
            got = target.result("t-shadow")
            if got.state in (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED):
                break
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.NOT_FOUND
        assert time.monotonic() < deadline, "the shadow copy never reached the target"
        time.sleep(0.05)
    assert got.state == pb.TASK_STATE_SUCCEEDED
    assert outputs(got.result) == [42]
    assert list(got.result.plugin_results) == [], "the receiver must strip the ResultHandler"


def test_no_shadow_without_sampling(start_worker):
    target = start_worker()
    primary = start_worker({"SHADOW_SUBMIT_TARGET_ADDR": f"127.0.0.1:{target.port}",
                            "SHADOW_SUBMIT_SAMPLE_RATE": "0"})
    primary.submit_calls("t-noshadow", [("add", [1, 1])])
    primary.wait_terminal("t-noshadow")
    time.sleep(0.3)
    with pytest.raises(grpc.RpcError) as ei:
        target.result("t-noshadow")
    assert ei.value.code() == grpc.StatusCode.NOT_FOUND
