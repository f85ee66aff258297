"""Session: batches under the message cap, the bounded outgoing list, request errors."""
import grpc
import pytest

from blockx.adapters.grpc import wire
from blockx.adapters.grpc.session import MAX_BATCH_BYTES, Session, SessionEnd
from blockx.adapters.subscriptions import SubscriptionManager
from blockx.core.errors import NotFoundError
from blockx.core.types import TaskResult, TaskSnapshot, TaskState, TaskStatistic
from blockx.worker.v1 import worker_pb2 as pb


class Orch:
    """The synchronous entry points a Session calls, over fixed snapshots."""

    def __init__(self, snaps):
        self.snaps = snaps
        self.subscriptions = SubscriptionManager(lambda t: None, lambda t, d: None)

    def start_accepted(self):
        pass                     # these snapshots are fixed: no task starts here

    def get_task_result(self, task_id, caller=None):
        try:
            return self.snaps[task_id]
        except KeyError:
            raise NotFoundError(f"task {task_id!r} is not known") from None


def done(task_id, output_bytes):
    r = TaskResult(TaskState.SUCCEEDED, "", "", False, [b'"' + b"x" * output_bytes + b'"'], [], TaskStatistic())
    return TaskSnapshot(task_id, "slot-0", TaskState.SUCCEEDED, r)


def gets(*task_ids):
    return pb.SessionRequestBatch(requests=[
        pb.SessionRequest(request_id=i + 1, get_result=pb.GetTaskResultRequest(task_id=t))
        for i, t in enumerate(task_ids)])


def make(snaps, **limits):
    counted = []
    s = Session(Orch(snaps), wire.TaskUpdateEncoder(), lambda m, c: counted.append((m, c)), **limits)
    return s, counted


async def test_events_of_one_iteration_come_as_batches_under_the_message_cap():
    s, counted = make({"big": done("big", 300_000), "small": done("small", 10)})
    s.handle(gets(*(["big"] * 10 + ["small"] * 5)))
    batches = []
    while sum(len(b) for b in batches) < 15:
        batches.append(await s.next_batch())
    assert [len(b) for b in batches] == [3, 3, 3, 6]
    assert [e.request_id for b in batches for e in b] == list(range(1, 16))
    assert all(sum(e.ByteSize() for e in b) < 4 * 1024 * 1024 for b in batches)
    assert sum(e.ByteSize() for e in batches[0]) <= MAX_BATCH_BYTES
    assert counted == [("TaskSession/get_result", "OK")] * 15


async def test_an_unknown_task_is_an_error_event_and_the_session_goes_on():
    s, counted = make({"a": done("a", 1)})
    s.handle(gets("nope", "a"))
    evs = await s.next_batch()
    assert [(e.request_id, e.WhichOneof("event")) for e in evs] == [(1, "error"), (2, "result")]
    assert evs[0].error.code == grpc.StatusCode.NOT_FOUND.value[0] and "'nope'" in evs[0].error.message
    assert counted == [("TaskSession/get_result", "NOT_FOUND"), ("TaskSession/get_result", "OK")]


async def test_overflow_drops_what_is_queued_and_ends_the_session_with_resource_exhausted():
    s, _ = make({"a": done("a", 1)}, max_pending_events=10, max_pending_bytes=1 << 30)
    s.handle(gets(*["a"] * 10))
    assert not s.overflowed.done()
    s.handle(gets("a"))
    assert s.overflowed.done()
    s.handle(gets(*["a"] * 100))           # ignored: the session has ended
    with pytest.raises(SessionEnd) as ei:
        await s.next_batch()
    assert ei.value.code == "RESOURCE_EXHAUSTED" and "stopped reading" in ei.value.message


async def test_shutdown_sends_what_is_queued_then_ends_unavailable():
    s, _ = make({"a": done("a", 1)})
    s.handle(gets("a", "a"))
    s.close()
    assert len(await s.next_batch()) == 2
    with pytest.raises(SessionEnd) as ei:
        await s.next_batch()
    assert ei.value.code == "UNAVAILABLE"


async def test_half_close_with_nothing_watched_finishes():
    s, _ = make({})
    s.eof()
    assert await s.next_batch() is None


def _progress_update(task_id, total, done_):
    return pb.TaskUpdate(task_id=task_id, state=pb.TASK_STATE_RUNNING,
                         progress=pb.TaskProgress(calls_total=total, calls_done=done_))


async def test_progress_is_shown_while_watched_once_per_change_and_never_after_terminal():
    running = TaskSnapshot("r", "slot-0", TaskState.RUNNING)
    o = Orch({"r": running})
    s = Session(o, wire.TaskUpdateEncoder(), lambda m, c: None)
    s.progress(_progress_update("r", 4, 1))                # not watched here: dropped
    s.handle(pb.SessionRequestBatch(requests=[
        pb.SessionRequest(request_id=1, watch=pb.WatchTasksRequest(task_ids=["r"]))]))
    (reply,) = await s.next_batch()
    assert reply.request_id == 1 and reply.update.state == pb.TASK_STATE_RUNNING
    o.subscriptions.publish_progress(_progress_update("r", 4, 1))
    o.subscriptions.publish_progress(_progress_update("r", 4, 1))   # the same counts again: not repeated
    o.subscriptions.publish_progress(_progress_update("r", 4, 3))
    evs = await s.next_batch()
    assert [(e.request_id, e.update.progress.calls_done) for e in evs] == [(0, 1), (0, 3)]
    o.subscriptions.publish(done("r", 1))                  # terminal: the watch ends
    o.subscriptions.publish_progress(_progress_update("r", 4, 4))
    evs = await s.next_batch()
    assert [(e.update.state, e.update.is_terminal) for e in evs] == [(pb.TASK_STATE_SUCCEEDED, True)]
    s.progress(_progress_update("r", 4, 4))
    s.eof()
    assert await s.next_batch() is None                    # nothing followed the terminal update
