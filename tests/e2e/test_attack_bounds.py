"""Attacks on the bounds of the gRPC side, against a real worker: huge ids, a
year-long slot TTL, oversized fields, a result too large for one message (it
pages: on a session shared with a normal task, via GetTaskResult, via
WatchTasks; one output too large for a message alone), a
WatchTasks client that stops reading, and too many sessions, streams and RPCs.
Each is refused with a status the API defines and a message naming the limit,
and hurts nothing else: the other tasks finish, the session and the stream live,
the worker still serves."""
from __future__ import annotations

import collections
import json
import queue
import time

import grpc
import pytest

from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc
from tests.support.worker import outputs

MiB = 1024 * 1024
YEAR_MS = 365 * 24 * 3600 * 1000
# big.py returns "x" * n: five calls of 14 MB are a 70 MB result, over the 64 MiB of one
# message at the default grpcMaxMessageBytes, each call within the executor's 16 MiB frame.
HUGE_CALLS = [("big", [14_000_000])] * 5


def fresh_channel(w) -> grpc.Channel:
    """A second connection to ``w`` (channels to one address share a connection
    unless told otherwise); its calls take ``call_metadata(w)``."""
    return grpc.insecure_channel(f"127.0.0.1:{w.port}", options=[("grpc.use_local_subchannel_pool", 1)])


def call_metadata(w):
    """The harness's credentials, when it has them."""
    try:
        from tests.support import auth
    except ImportError:
        return None
    return auth.metadata(w.token)


class SyncSession:
    """A TaskSession on the harness's channel: send batches, read events one by one."""

    def __init__(self, stub, timeout: float = 60) -> None:
        self._q: queue.Queue = queue.Queue()
        self.call = stub.TaskSession(iter(self._q.get, None), timeout=timeout)
        self._events: collections.deque = collections.deque()

    def send(self, *reqs: pb.SessionRequest) -> None:
        self._q.put(pb.SessionRequestBatch(requests=list(reqs)))

    def next(self) -> pb.SessionEvent:
        while not self._events:
            self._events.extend(next(self.call).events)
        return self._events.popleft()

    def until(self, pred, limit: int = 1000) -> list[pb.SessionEvent]:
        """Events up to and including the first for which ``pred`` holds."""
        seen = []
        for _ in range(limit):
            ev = self.next()
            seen.append(ev)
            if pred(ev):
                return seen
        raise AssertionError(f"no such event in {limit}: {seen[-5:]}")

    def close(self) -> None:
        self._q.put(None)


def calls_task(task_id: str, calls) -> pb.Task:
    payload = json.dumps({"calls": [{"functionId": f, "args": a} for f, a in calls]}).encode()
    return pb.Task(task_id=task_id, function_call=pb.FunctionCallConfig(type="callList", payload=payload))


def submit_req(rid: int, task_id: str, calls, follow: bool = True) -> pb.SessionRequest:
    return pb.SessionRequest(request_id=rid, follow=follow,
                             submit=pb.SubmitTaskRequest(task=calls_task(task_id, calls)))


def terminal_of(task_id: str):
    return lambda ev: ev.WhichOneof("event") == "update" and ev.update.task_id == task_id and ev.update.is_terminal


def rpc_error(fn, *args, **kw) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as ei:
        r = fn(*args, **kw)
        if hasattr(r, "__iter__") and not isinstance(r, (bytes, str)):
            list(r)
    return ei.value


def serves_a_normal_task(w, task_id: str) -> None:
    w.submit_calls(task_id, [("add", [2, 3])])
    res = w.wait_terminal(task_id)
    assert res.state == pb.TASK_STATE_SUCCEEDED and outputs(res) == [5]


@pytest.fixture(scope="module")
def huge_worker(tmp_path_factory):
    """Default limits; one task whose result (70 MB) is over one message."""
    from tests.e2e.conftest import make_functions_dir
    from tests.support.worker import WorkerProcess
    w = WorkerProcess({"TASK_SLOTS": "8", "RESULT_RETENTION_MS": "120000", "CALL_DEADLINE_MS": "60000"},
                      functions_dir=make_functions_dir(tmp_path_factory.mktemp("fn")))
    w.start()
    try:
        yield w
    finally:
        w.stop()


# ---- ids, TTLs and fields ------------------------------------------------------------


def test_a_1_mib_task_id_is_refused_by_every_entry_without_a_huge_log_line(worker):
    tid = "T" * MiB
    s = worker.stub
    calls = [(s.RequestTaskSlot, pb.RequestTaskSlotRequest(task_id=tid, ttl_ms=1000)),
             (s.SubmitTask, pb.SubmitTaskRequest(task=calls_task(tid, [("add", [1, 2])]))),
             (s.GetTaskResult, pb.GetTaskResultRequest(task_id=tid)),
             (s.WatchTasks, pb.WatchTasksRequest(task_ids=["ok-id", tid])),
             (s.GetTaskTrace, pb.GetTaskTraceRequest(task_id=tid))]
    for fn, request in calls:
        err = rpc_error(fn, request, timeout=20)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (fn, err.code(), err.details()[:200])
        assert "task_id" in err.details() and "is 1048576 bytes, over the limit of 256 bytes" in err.details()
        assert len(err.details()) < 400
    sess = SyncSession(s)
    sess.send(pb.SessionRequest(request_id=1, request_slot=pb.RequestTaskSlotRequest(task_id=tid)),
              pb.SessionRequest(request_id=2, submit=pb.SubmitTaskRequest(task=calls_task(tid, [("add", [1, 2])]))),
              pb.SessionRequest(request_id=3, get_result=pb.GetTaskResultRequest(task_id=tid)),
              pb.SessionRequest(request_id=4, watch=pb.WatchTasksRequest(task_ids=[tid])))
    for rid in (1, 2, 3, 4):
        ev = sess.next()
        assert (ev.request_id, ev.WhichOneof("event"), ev.error.code) == (rid, "error", grpc.StatusCode.INVALID_ARGUMENT.value[0])
        assert "over the limit of 256 bytes" in ev.error.message and len(ev.error.message) < 400
    sess.close()
    assert list(sess.call) == []
    serves_a_normal_task(worker, "after-huge-id")
    time.sleep(0.2)
    longest = max(len(line) for line in worker.lines)
    assert longest < 8192, f"a {longest}-character line in the worker's log"


def test_a_1_mib_function_id_fails_its_task_with_a_short_message_and_no_huge_log_line(worker):
    # A function id is data from the payload like a task id: it reaches the task's
    # failure message, the task_finished log line and traces, so it is bounded too.
    first = len(worker.lines)
    worker.submit_calls("huge-fn-id", [("F" * MiB, [1])])
    res = worker.wait_terminal("huge-fn-id")
    assert res.state == pb.TASK_STATE_FAILED and res.failure_code == "BUILDER_FAILED", res.failure_code
    msg = res.failure_message
    assert "calls[0].functionId" in msg and "1048576 characters, over the limit of 256" in msg, msg[:300]
    assert len(msg) < 400, len(msg)
    serves_a_normal_task(worker, "after-huge-fn-id")
    time.sleep(0.2)
    longest = max(len(line) for line in worker.lines[first:])
    assert longest < 8192, f"a {longest}-character line in the worker's log"


def test_a_year_long_ttl_is_refused_and_holds_no_slot(start_worker):
    w = start_worker({"TASK_SLOTS": "2"})
    for i in range(50):
        err = rpc_error(w.stub.RequestTaskSlot, pb.RequestTaskSlotRequest(task_id=f"y{i}", ttl_ms=YEAR_MS),
                        timeout=10)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"ttl_ms {YEAR_MS} exceeds" in err.details() and "maxSlotTtlMs" in err.details()
    sess = SyncSession(w.stub)
    sess.send(pb.SessionRequest(request_id=7, request_slot=pb.RequestTaskSlotRequest(task_id="y", ttl_ms=YEAR_MS)))
    ev = sess.next()
    assert ev.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and "maxSlotTtlMs" in ev.error.message
    sess.close()
    list(sess.call)
    st = w.stub.GetWorkerStatus(pb.GetWorkerStatusRequest(), timeout=10)
    assert (st.slots.total, st.slots.free) == (2, 2)
    ok = w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="ten-min", ttl_ms=600_000), timeout=10)
    assert ok.slot_id == "slot-0"


def test_oversized_payload_config_and_instance_id_are_refused_naming_the_setting(start_worker):
    w = start_worker({"MAX_PAYLOAD_BYTES": "1000", "MAX_RESULT_HANDLER_CONFIG_BYTES": "100",
                      "MAX_INSTANCE_ID_BYTES": "16"})
    big_payload = {"calls": [{"functionId": "echo", "args": ["x" * 1000]}]}
    big_config = {"x": "y" * 100}
    cases = [({"payload": big_payload},
              f"task.function_call.payload is {len(json.dumps(big_payload))} bytes, over the limit of 1000 bytes "
              "(worker.maxPayloadBytes"),
             ({"payload": {"calls": []}, "result_handler": ("log", big_config)},
              f"task.result_handler.config is {len(json.dumps(big_config))} bytes, over the limit of 100 bytes "
              "(worker.maxResultHandlerConfigBytes"),
             ({"payload": {"calls": []}, "instance_id": "i" * 17},
              "task.instance_id is 17 bytes, over the limit of 16 bytes (worker.maxInstanceIdBytes")]
    for i, (kw, expected) in enumerate(cases):
        err = rpc_error(w.submit, f"f{i}", "callList", **kw)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and expected in err.details(), err.details()
    serves_a_normal_task(w, "after-fields")


def test_an_undecodable_request_is_invalid_argument_not_unknown(worker):
    raw = pb.GetTaskResultRequest(task_id="ok").SerializeToString().replace(b"ok", b"\xff\xfe")
    err = rpc_error(worker.channel.unary_unary("/blockx.worker.v1.WorkerService/GetTaskResult"), raw, timeout=10)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid blockx.worker.v1.GetTaskResultRequest message" in err.details()
    call = worker.channel.stream_stream("/blockx.worker.v1.WorkerService/TaskSession")
    err = rpc_error(call, iter([b"\x0a\x04\x22\x02\xff\xfe"]), timeout=10)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "SessionRequestBatch" in err.details()


# ---- a result too large for one message: it pages -----------------------------------


def first_page_of_huge(r: pb.TaskResult) -> None:
    """The first page of HUGE_CALLS' result: none of its 14 MB outputs fits a page."""
    assert r.state == pb.TASK_STATE_SUCCEEDED and r.failure_code == "" and list(r.outputs) == []
    assert (r.outputs_total, r.outputs_offset, r.outputs_truncated) == (5, 0, True)
    assert r.statistic.call_count == 5


def test_an_oversized_result_on_a_session_ends_neither_the_session_nor_the_other_task(huge_worker):
    w = huge_worker
    sess = SyncSession(w.stub, timeout=120)
    sess.send(submit_req(1, "huge-s", HUGE_CALLS), submit_req(2, "small-s", [("add", [20, 22])]))
    seen = sess.until(terminal_of("huge-s"))
    seen += [] if any(terminal_of("small-s")(e) for e in seen) else sess.until(terminal_of("small-s"))
    small = [e.update for e in seen if terminal_of("small-s")(e)][0]
    assert small.result.state == pb.TASK_STATE_SUCCEEDED and outputs(small.result) == [42]
    assert (small.result.outputs_total, small.result.outputs_truncated) == (1, False)
    huge = [e.update for e in seen if terminal_of("huge-s")(e)][0]
    assert huge.state == pb.TASK_STATE_SUCCEEDED
    first_page_of_huge(huge.result)
    # the session lives: replies that carry the result carry a page of it
    sess.send(pb.SessionRequest(request_id=3, get_result=pb.GetTaskResultRequest(task_id="huge-s")),
              pb.SessionRequest(request_id=4, get_result=pb.GetTaskResultRequest(task_id="small-s")),
              submit_req(5, "huge-s", HUGE_CALLS, follow=False),
              pb.SessionRequest(request_id=6, get_result=pb.GetTaskResultRequest(task_id="huge-s",
                                                                                  outputs_offset=6)),
              submit_req(7, "after-s", [("add", [1, 1])]))
    ev3, ev4, ev5, ev6 = sess.next(), sess.next(), sess.next(), sess.next()
    assert (ev3.request_id, ev4.request_id, ev5.request_id, ev6.request_id) == (3, 4, 5, 6)
    first_page_of_huge(ev3.result.result)
    first_page_of_huge(ev5.submitted.result)
    assert outputs(ev4.result.result) == [42]
    assert ev6.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "outputs_offset 6 is past the end of task 'huge-s''s 5 outputs" in ev6.error.message
    after = [e.update for e in sess.until(terminal_of("after-s"))][-1]
    assert outputs(after.result) == [2]
    sess.close()
    assert list(sess.call) == []          # ends OK


def test_an_oversized_result_via_get_task_result_submit_and_slot_pages(huge_worker):
    w = huge_worker
    w.submit_calls("huge-u", HUGE_CALLS, rpc_timeout=30)
    first_page_of_huge(w.wait_terminal("huge-u", timeout=120))        # on the harness's 4 MiB channel
    first_page_of_huge(w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="huge-u"), timeout=30).result)
    first_page_of_huge(w.stub.SubmitTask(pb.SubmitTaskRequest(task=calls_task("huge-u", HUGE_CALLS)),
                                         timeout=30).result)
    first_page_of_huge(w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="huge-u"), timeout=30).result)
    # one output by count: over the page budget, within one message (a client that takes 64 MiB)
    big = grpc.insecure_channel(f"127.0.0.1:{w.port}", options=[("grpc.max_receive_message_length", 64 * MiB)])
    try:
        stub = pb_grpc.WorkerServiceStub(big)
        r = stub.GetTaskResult(pb.GetTaskResultRequest(task_id="huge-u", outputs_offset=4, outputs_limit=1),
                               timeout=60, metadata=call_metadata(w)).result
    finally:
        big.close()
    assert (len(r.outputs), r.outputs_offset, r.outputs_total, r.outputs_truncated) == (1, 4, 5, False)
    assert r.outputs[0] == b'"' + b"x" * 14_000_000 + b'"'
    serves_a_normal_task(w, "after-u")


def test_one_output_over_one_message_is_resource_exhausted_for_that_request_alone(start_worker):
    w = start_worker({"WORKER_GRPC_MAX_MESSAGE_BYTES": str(8 * MiB), "RESULT_RETENTION_MS": "60000",
                      "CALL_DEADLINE_MS": "60000"})
    w.submit_calls("one-big", [("add", [1, 2]), ("big", [10_000_000]), ("add", [3, 4])], rpc_timeout=30)
    r = w.wait_terminal("one-big", timeout=120)
    assert (outputs(r), r.outputs_total, r.outputs_truncated, r.failure_code) == ([3], 3, True, "")
    assert list(w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="one-big", outputs_offset=1),
                                     timeout=30).result.outputs) == []
    err = rpc_error(w.stub.GetTaskResult, pb.GetTaskResultRequest(task_id="one-big", outputs_offset=1,
                                                                  outputs_limit=1), timeout=30)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "the result of task 'one-big' is" in err.details()
    assert "over the limit of 8388608 bytes of one gRPC message (grpcMaxMessageBytes " \
           "(WORKER_GRPC_MAX_MESSAGE_BYTES))" in err.details()
    assert err.details().endswith("(output 1 of its 3 alone; the other outputs page as usual, from outputs_offset 2)")
    last = w.stub.GetTaskResult(pb.GetTaskResultRequest(task_id="one-big", outputs_offset=2), timeout=30).result
    assert (outputs(last), last.outputs_truncated) == ([7], False)
    serves_a_normal_task(w, "after-big")


def test_an_oversized_result_via_watch_tasks_is_paged_and_the_stream_goes_on(huge_worker):
    w = huge_worker
    w.submit_calls("huge-w", HUGE_CALLS, rpc_timeout=30)
    w.submit_calls("slow-w", [("sleep_ms", [1500])])
    got = {}
    for upd in w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["huge-w", "slow-w"]), timeout=120):
        if upd.is_terminal:
            got[upd.task_id] = upd
    assert set(got) == {"huge-w", "slow-w"}        # the stream ended OK after both
    assert got["huge-w"].state == pb.TASK_STATE_SUCCEEDED
    first_page_of_huge(got["huge-w"].result)
    assert got["slow-w"].result.state == pb.TASK_STATE_SUCCEEDED and got["slow-w"].result.outputs


# ---- queues, sessions, streams and RPCs ------------------------------------------------


def test_a_watch_client_that_stops_reading_overflows_only_its_own_stream(start_worker):
    w = start_worker({"WATCH_MAX_PENDING_UPDATES": "4", "TASK_SLOTS": "16"})
    ids = [f"o{i}" for i in range(12)]
    for tid in ids:                                  # 1 MB results: a few fill the HTTP/2 window
        w.submit_calls(tid, [("sleep_ms", [300]), ("big", [1_000_000])])
    w.submit_calls("steady", [("sleep_ms", [1200])])
    steady = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["steady"]), timeout=60)
    stalled = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=ids), timeout=60)
    first = next(stalled)                            # the stream is open; now stop reading
    assert first.task_id == ids[0]
    for tid in ids:
        w.wait_terminal(tid)
    time.sleep(0.5)
    err = None
    n = 1
    try:
        for _ in stalled:
            n += 1
    except grpc.RpcError as e:
        err = e
    assert err is not None, f"the stalled stream delivered all {n} updates: its queue has no bound"
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
    assert "queue overflowed" in err.details() and "watchMaxPendingUpdates" in err.details()
    assert [u.is_terminal for u in steady][-1] is True
    serves_a_normal_task(w, "after-overflow")


def test_sessions_and_watch_streams_past_their_limits_are_refused_and_freed(start_worker):
    w = start_worker({"MAX_TASK_SESSIONS": "2", "MAX_WATCH_STREAMS": "2"})
    a, b = SyncSession(w.stub), SyncSession(w.stub)
    for i, s in enumerate((a, b)):
        s.send(pb.SessionRequest(request_id=1, get_result=pb.GetTaskResultRequest(task_id=f"none{i}")))
        assert s.next().error.code == grpc.StatusCode.NOT_FOUND.value[0]
    err = rpc_error(w.stub.TaskSession, iter([pb.SessionRequestBatch()]), timeout=10)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "2 TaskSession streams are open on this worker, its limit (maxTaskSessions, MAX_TASK_SESSIONS)" \
        in err.details()
    a.close()
    assert list(a.call) == []
    c = SyncSession(w.stub)
    c.send(submit_req(1, "c1", [("add", [1, 2])]))
    assert outputs([e.update for e in c.until(terminal_of("c1"))][-1].result) == [3]
    c.close(), b.close()
    list(c.call), list(b.call)

    w.submit_calls("long1", [("sleep_ms", [3000])])
    w.submit_calls("long2", [("sleep_ms", [3000])])
    s1 = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["long1"]), timeout=30)
    s2 = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["long2"]), timeout=30)
    next(s1), next(s2)
    err = rpc_error(w.stub.WatchTasks, pb.WatchTasksRequest(task_ids=["long1"]), timeout=10)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "WatchTasks streams are open on this worker, its limit (maxWatchStreams, MAX_WATCH_STREAMS)" \
        in err.details()
    assert list(s1)[-1].is_terminal and list(s2)[-1].is_terminal
    serves_a_normal_task(w, "after-streams")          # wait_terminal opens a watch: the count went down


def test_concurrent_rpcs_past_the_limit_are_resource_exhausted(start_worker):
    w = start_worker({"WORKER_GRPC_MAX_CONCURRENT_RPCS": "3"})
    sessions = [SyncSession(w.stub) for _ in range(3)]
    for i, s in enumerate(sessions):
        s.send(pb.SessionRequest(request_id=1, get_result=pb.GetTaskResultRequest(task_id=f"n{i}")))
        assert s.next().request_id == 1
    err = rpc_error(w.stub.GetTaskResult, pb.GetTaskResultRequest(task_id="x"), timeout=10)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "Concurrent RPC limit" in err.details()
    for s in sessions:
        s.close()
        list(s.call)
    time.sleep(0.2)
    serves_a_normal_task(w, "after-rpcs")


def test_streams_past_the_per_connection_limit_wait_while_another_connection_is_served(start_worker):
    w = start_worker({"WORKER_GRPC_MAX_CONCURRENT_STREAMS": "2"})
    open_ = [SyncSession(w.stub) for _ in range(2)]
    for i, s in enumerate(open_):
        s.send(pb.SessionRequest(request_id=1, get_result=pb.GetTaskResultRequest(task_id=f"n{i}")))
        assert s.next().request_id == 1
    err = rpc_error(w.stub.GetTaskResult, pb.GetTaskResultRequest(task_id="x"), timeout=1.5)
    assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED     # a third stream on this connection waits
    other = fresh_channel(w)
    try:
        err = rpc_error(pb_stub(other).GetTaskResult, pb.GetTaskResultRequest(task_id="x"), timeout=10,
                        metadata=call_metadata(w))
        assert err.code() == grpc.StatusCode.NOT_FOUND         # served at once on another connection
    finally:
        other.close()
    for s in open_:
        s.close()
        list(s.call)
    serves_a_normal_task(w, "after-conn-streams")


def pb_stub(channel):
    from blockx.worker.v1 import worker_pb2_grpc as pb_grpc
    return pb_grpc.WorkerServiceStub(channel)


def test_connections_past_the_limit_are_closed_while_the_open_one_is_served(start_worker):
    w = start_worker({"WORKER_GRPC_MAX_CONNECTIONS": "1"})       # the harness's channel is the one
    other = fresh_channel(w)
    try:
        err = rpc_error(pb_stub(other).GetTaskResult, pb.GetTaskResultRequest(task_id="x"), timeout=5,
                        metadata=call_metadata(w))
        assert err.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        other.close()
    serves_a_normal_task(w, "after-conns")
