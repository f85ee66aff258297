"""WatchTasks over a real grpc.aio server attaches only the tasks that can still
change: a task already terminal in its snapshot gets its terminal update and no
subscription (no first-attach / last-detach round through the core, no progress
timer), and a watch of ended tasks only attaches nothing at all."""
import asyncio

import grpc
import pytest

from blockx.adapters.grpc.server import build_server
from blockx.adapters.subscriptions import SubscriptionManager
from blockx.core.errors import NotFoundError
from blockx.core.types import TaskResult, TaskSnapshot, TaskState, TaskStatistic
from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc


def ended(task_id: str, out: bytes) -> TaskSnapshot:
    return TaskSnapshot(task_id, "", TaskState.SUCCEEDED,
                        TaskResult(TaskState.SUCCEEDED, outputs=[out], statistic=TaskStatistic(call_count=1)))


class Orch:
    """The orchestrator's read side over a fixed table of snapshots, with a real
    SubscriptionManager whose attach / detach callbacks are recorded."""

    def __init__(self, snaps):
        self.snaps = {s.task_id: s for s in snaps}
        self.attached: list[str] = []
        self.detached: list[str] = []
        self.subscriptions = SubscriptionManager(self.attached.append, lambda t, d: self.detached.append(t))

    def get_task_result(self, task_id, caller=None):
        try:
            return self.snaps[task_id]
        except KeyError:
            raise NotFoundError(f"task {task_id!r} not found") from None


@pytest.fixture
async def served():
    orch = Orch([ended("done-1", b"2"), ended("done-2", b"3"), TaskSnapshot("run-1", "", TaskState.RUNNING)])
    server, _, port = build_server(orch, listen_addr="127.0.0.1:0", keepalive_time_ms=30_000,
                                   keepalive_timeout_ms=10_000)
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield orch, pb_grpc.WorkerServiceStub(channel)
    finally:
        await channel.close()
        await server.stop(0)


async def test_a_watch_of_ended_tasks_gets_their_results_and_attaches_nothing(served):
    orch, stub = served
    got = [u async for u in stub.WatchTasks(pb.WatchTasksRequest(task_ids=["done-1", "done-2"]), timeout=10)]
    assert [(u.task_id, u.is_terminal, list(u.result.outputs)) for u in got] == [
        ("done-1", True, [b"2"]), ("done-2", True, [b"3"])]
    assert orch.attached == [] and orch.detached == []
    assert len(orch.subscriptions) == 0 and orch.subscriptions.watched_count() == 0


async def test_only_the_running_task_of_a_watch_is_attached_and_followed_to_its_end(served):
    orch, stub = served
    call = stub.WatchTasks(pb.WatchTasksRequest(task_ids=["done-1", "run-1"]), timeout=10)
    first = [await call.read(), await call.read()]
    assert [(u.task_id, u.state, u.is_terminal) for u in first] == [
        ("done-1", pb.TASK_STATE_SUCCEEDED, True), ("run-1", pb.TASK_STATE_RUNNING, False)]
    assert orch.attached == ["run-1"]
    assert orch.subscriptions.watched("run-1") and not orch.subscriptions.watched("done-1")
    orch.snaps["run-1"] = ended("run-1", b"9")
    orch.subscriptions.publish(orch.snaps["run-1"])
    last = await call.read()
    assert (last.task_id, last.is_terminal, list(last.result.outputs)) == ("run-1", True, [b"9"])
    assert await call.read() is grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK
    for _ in range(100):                 # the handler's finally runs just after the status is sent
        if orch.detached:
            break
        await asyncio.sleep(0.01)
    assert orch.detached == ["run-1"] and orch.subscriptions.watched_count() == 0
