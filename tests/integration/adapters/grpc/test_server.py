"""The gRPC layer over a real grpc.aio server: a bug in the Worker behind any RPC
(unary, WatchTasks, TaskSession) answers INTERNAL with a short message, is counted
in blockx_grpc_requests_total, and logs its traceback; the server keeps serving."""
import logging

import grpc
import pytest

from blockx.adapters.grpc.server import build_server
from blockx.adapters.telemetry.metrics import Metrics
from blockx.adapters.subscriptions import SubscriptionManager
from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc


class BuggyOrch:
    """Every entry point raises what no caller expects."""

    def __init__(self):
        self.subscriptions = SubscriptionManager(lambda t: None, lambda t, d: None)

    def request_task_slot(self, task_id, ttl_ms, caller=None):
        raise RuntimeError("boom in request_task_slot")

    def submit_task(self, req, shadow=False, raw_request=None, caller=None, trace_context=None, unary=False):
        raise KeyError("boom in submit_task")

    def get_task_result(self, task_id, caller=None):
        raise ZeroDivisionError("boom in get_task_result")


class BrokenSubscriptions(SubscriptionManager):
    def register(self, sub):
        raise RuntimeError("boom in register")


@pytest.fixture
async def served():
    metrics = Metrics()
    orch = BuggyOrch()
    server, _, port = build_server(orch, listen_addr="127.0.0.1:0", keepalive_time_ms=30_000,
                                   keepalive_timeout_ms=10_000, metrics=metrics)
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield orch, pb_grpc.WorkerServiceStub(channel), metrics
    finally:
        await channel.close()
        await server.stop(0)


async def expect_internal(coro):
    with pytest.raises(grpc.aio.AioRpcError) as ei:
        await coro
    assert ei.value.code() == grpc.StatusCode.INTERNAL, ei.value
    details = ei.value.details()
    assert "internal error in the worker" in details and "boom" not in details and len(details) < 120
    return details


async def test_unary_bugs_are_internal_counted_and_logged(served, caplog):
    _, stub, metrics = served
    caplog.set_level(logging.ERROR, logger="blockx.grpc")
    await expect_internal(stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="t")))
    await expect_internal(stub.SubmitTask(pb.SubmitTaskRequest(task=pb.Task(task_id="t"))))
    await expect_internal(stub.GetTaskResult(pb.GetTaskResultRequest(task_id="t")))
    assert {k: v for k, v in metrics.grpc_requests.items() if k[1] == "INTERNAL"} == {
        ("RequestTaskSlot", "INTERNAL"): 1, ("SubmitTask", "INTERNAL"): 1, ("GetTaskResult", "INTERNAL"): 1}
    tracebacks = "\n".join(r.exc_text or "" for r in caplog.records)
    for name in ("request_task_slot", "submit_task", "get_task_result"):
        assert f"boom in {name}" in tracebacks


async def test_stream_bugs_are_internal_counted_and_logged(served, caplog):
    orch, stub, metrics = served
    caplog.set_level(logging.ERROR, logger="blockx.grpc")

    async def drain_watch():
        async for _ in stub.WatchTasks(pb.WatchTasksRequest(task_ids=["t"])):
            pass
    await expect_internal(drain_watch())
    assert metrics.grpc_requests[("WatchTasks", "INTERNAL")] == 1

    orch.subscriptions = BrokenSubscriptions(lambda t: None, lambda t, d: None)
    call = stub.TaskSession()
    try:
        await call.write(pb.SessionRequestBatch())
    except grpc.aio.AioRpcError:
        # register fails as the stream opens, so the server may end the stream before
        # this write lands; grpc then fails the write with its own INTERNAL details
        assert await call.code() == grpc.StatusCode.INTERNAL
    else:
        async def drain_session():
            async for _ in call:
                pass
        await expect_internal(drain_session())
    assert metrics.grpc_requests[("TaskSession", "INTERNAL")] == 1
    tracebacks = "\n".join(r.exc_text or "" for r in caplog.records)
    assert "boom in get_task_result" in tracebacks and "boom in register" in tracebacks


async def test_a_bug_behind_one_session_request_answers_that_request_internal(served):
    _, stub, metrics = served
    call = stub.TaskSession()
    await call.write(pb.SessionRequestBatch(requests=[
        pb.SessionRequest(request_id=1, get_result=pb.GetTaskResultRequest(task_id="t")),
        pb.SessionRequest(request_id=2, request_slot=pb.RequestTaskSlotRequest(task_id="t"))]))
    batch = await call.read()
    evs = list(batch.events)
    while len(evs) < 2:
        evs += list((await call.read()).events)
    assert [(e.request_id, e.error.code) for e in evs] == [(1, grpc.StatusCode.INTERNAL.value[0]),
                                                           (2, grpc.StatusCode.INTERNAL.value[0])]
    assert metrics.grpc_requests[("TaskSession/get_result", "INTERNAL")] == 1
    call.cancel()
