"""A WatchTasks queue's bound, the open-stream counts, and requests that do not decode."""
from blockx.adapters.grpc.limits import GrpcLimits
from blockx.adapters.grpc.open_streams import OpenStreams
from blockx.adapters.grpc.request_decode import Undecodable, _decoder
from blockx.adapters.subscriptions import CLOSED, DEFAULT_MAX_PENDING, OVERFLOW, Subscription, SubscriptionManager
from blockx.core.types import TaskSnapshot, TaskState
from blockx.worker.v1 import worker_pb2 as pb


def snap(task_id, state=TaskState.RUNNING):
    return TaskSnapshot(task_id, "slot-0", state)


async def test_a_watch_queue_holds_max_pending_items_then_overflows_once():
    calls = []
    sub = Subscription(3, lambda: calls.append(1))
    for i in range(3):
        sub.deliver(snap(f"t{i}"))
    assert sub.queue.qsize() == 3 and not sub.overflowed and calls == []
    sub.progress(pb.TaskUpdate(task_id="t0"))
    assert sub.overflowed and calls == [1]
    assert sub.queue.qsize() == 1 and sub.queue.get_nowait() is OVERFLOW     # what was queued is dropped
    sub.deliver(snap("t1"))
    sub.gone("t2")
    assert sub.queue.qsize() == 0 and calls == [1]                          # nothing more, called once
    sub.close()
    assert sub.queue.get_nowait() is CLOSED


async def test_a_manager_routes_to_a_bounded_subscription_and_the_default_bound():
    m = SubscriptionManager(lambda t: None, lambda t, d: None)
    sub = m.attach(["a"], Subscription(1))
    m.publish(snap("a"))
    m.publish(snap("a", TaskState.SUCCEEDED))
    assert sub.overflowed
    assert DEFAULT_MAX_PENDING == 65_536 and m.attach(["b"]).queue.maxsize == 0


def test_open_streams_refuses_past_the_limit_and_frees_on_leave():
    o = OpenStreams("TaskSession", 2, "maxTaskSessions, MAX_TASK_SESSIONS")
    assert o.enter() and o.enter() and not o.enter()
    assert o.open == 2
    assert o.refusal().startswith("2 TaskSession streams are open on this worker, its limit "
                                  "(maxTaskSessions, MAX_TASK_SESSIONS)")
    o.leave()
    assert o.enter() and o.open == 2


def test_grpc_limits_defaults_and_server_options():
    g = GrpcLimits()
    assert (g.max_message_bytes, g.max_concurrent_streams, g.max_concurrent_rpcs, g.max_connections,
            g.max_task_sessions, g.max_watch_streams, g.watch_max_pending_updates) == \
        (64 * 1024 * 1024, 1000, 10000, 1000, 1000, 1000, 65536)
    assert dict(GrpcLimits(max_message_bytes=5 << 20, max_concurrent_streams=7, max_connections=9).server_options()) == {
        "grpc.max_receive_message_length": 5 << 20, "grpc.max_send_message_length": 5 << 20,
        "grpc.max_concurrent_streams": 7, "grpc.max_allowed_incoming_connections": 9}


def test_a_request_that_does_not_decode_becomes_an_undecodable_saying_why():
    decode = _decoder(pb.GetTaskResultRequest)
    assert decode(pb.GetTaskResultRequest(task_id="ok").SerializeToString()).task_id == "ok"
    bad = decode(b"\x0a\x02\xff\xfe")
    assert type(bad) is Undecodable and bad.type_name == "blockx.worker.v1.GetTaskResultRequest"
    assert bad.refusal().startswith("the request is not a valid blockx.worker.v1.GetTaskResultRequest message (")
    assert "UTF-8" in bad.refusal()
    assert type(decode(b"\xff\xff\xff")) is Undecodable


def test_open_streams_hold_each_identity_to_its_share_but_not_admin():
    from blockx.core.owners import Caller
    alice, bob, admin = Caller("alice"), Caller("bob"), Caller("admin", admin=True)
    o = OpenStreams("TaskSession", 5, "maxTaskSessions, MAX_TASK_SESSIONS", 2,
                    "maxTaskSessionsPerIdentity, MAX_TASK_SESSIONS_PER_IDENTITY")
    assert o.enter(alice) and o.enter(alice) and not o.enter(alice)
    assert o.identity_full(alice) and o.refusal(alice).startswith(
        "identity 'alice' has 2 TaskSession streams open on this worker, its share "
        "(maxTaskSessionsPerIdentity, MAX_TASK_SESSIONS_PER_IDENTITY)")
    assert o.enter(bob) and o.enter(admin) and o.enter(admin) and not o.enter(admin)   # the worker-wide bound
    assert not o.identity_full(admin) and o.refusal(admin).startswith("5 TaskSession streams are open")
    assert o.by_identity() == {"alice": 2, "bob": 1}
    o.leave(alice)
    assert o.enter(alice) and o.by_identity() == {"alice": 2, "bob": 1}     # her stream went back to her share
    assert not o.enter(bob) and not o.identity_full(bob)                     # the worker is full again
    for c in (alice, alice, bob, admin, admin):
        o.leave(c)
    assert o.open == 0 and o.by_identity() == {}
