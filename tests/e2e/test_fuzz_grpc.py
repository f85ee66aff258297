"""A property-based fuzzer of the gRPC API against one live worker.

Hypothesis builds raw serialized messages from the proto descriptors, so what
the server receives is exactly what was generated: strings that are invalid
UTF-8, huge fields, negative and overflowing numbers, unknown enum values,
unknown fields and wrong wire types, and random bytes as a whole message, for
every RPC and every session op. Ids, builder names and payloads are drawn from
small pools often enough that the requests also reach the task state machine
(slots reserved and submitted, tasks run, watched and fetched).

Asserted: every answer is a status code the API defines (never UNKNOWN or
INTERNAL, including every SessionError code), the worker logs no unexpected
error, and afterwards it is healthy and runs a normal task. The calls go through
the harness's channel (``worker.channel``), so its credentials apply.
"""
from __future__ import annotations

import collections
import json
import struct
import time

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor as FD
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blockx.worker.v1 import worker_pb2 as pb
from tests.support.worker import WorkerProcess, outputs

SERVICE = pb.DESCRIPTOR.services_by_name["WorkerService"]
METHODS = {m.name: m for m in SERVICE.methods}
PATH = "/" + SERVICE.full_name + "/"

# What the API answers (OK or a code of its error mapping); a client deadline only
# on the streams, which may legitimately wait for a task the fuzzer started.
ALLOWED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED,
           grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND,
           grpc.StatusCode.ABORTED, grpc.StatusCode.ALREADY_EXISTS}
STREAM_ALLOWED = ALLOWED | {grpc.StatusCode.DEADLINE_EXCEEDED}
ALLOWED_NUMBERS = {c.value[0] for c in ALLOWED}
UNARY_TIMEOUT = 20.0
STREAM_TIMEOUT = 3.0

TASK_IDS = [f"fz{i}" for i in range(12)]
BUILDERS = ["callList", "static", "payload", "rangeScan", "nope"]
SMALL_CALLS = st.lists(st.sampled_from([("add", [1, 2]), ("echo", ["e"]), ("sleep_ms", [5]), ("fail", []),
                                        ("square", [3]), ("missing_fn", [])]), max_size=4)
HUGE = [257, 70_000, 1024 * 1024 + 1]
SEEN: collections.Counter = collections.Counter()      # (method, code name) answered, over the run


# ---- the protobuf wire format, by hand ----------------------------------------------------

def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def length_delimited(number: int, data: bytes) -> bytes:
    return tag(number, 2) + varint(len(data)) + data


INTS = st.one_of(st.integers(-(2**63), 2**64 - 1),
                 st.sampled_from([0, 1, -1, 2, 3, 7, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**64 - 1,
                                  -(2**63), 600_000, 600_001, 365 * 24 * 3600 * 1000]))
RAW_BYTES = st.binary(max_size=64)
INVALID_UTF8 = st.sampled_from([b"\xff", b"\xfe\xff", b"a\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"ok\x80ok"])
HUGE_BYTES = st.sampled_from(HUGE).map(lambda n: b"H" * n)


def string_value(field, valid: bool) -> st.SearchStrategy[bytes]:
    name = field.name
    pool = None
    if name in ("task_id", "task_ids"):
        pool = st.sampled_from(TASK_IDS).map(str.encode)
    elif name == "slot_id":
        pool = st.sampled_from(["", "slot-0", "slot-1", "slot-99", "slot--1", "x"]).map(str.encode)
    elif name == "type":
        pool = st.sampled_from(BUILDERS + ["log", "test", ""]).map(str.encode)
    text = st.text(max_size=20).map(str.encode)
    if valid:
        huge_text = st.sampled_from(HUGE).map(lambda n: b"H" * n)
        if pool is None:
            return st.one_of(text, text, text, huge_text)
        return st.one_of(pool, pool, pool, pool, pool, text, huge_text)
    return st.one_of(*([pool] if pool is not None else []), text, INVALID_UTF8, RAW_BYTES, HUGE_BYTES)


def payload_value() -> st.SearchStrategy[bytes]:
    call_list = SMALL_CALLS.map(lambda cs: json.dumps(
        {"calls": [{"functionId": f, "args": a} for f, a in cs]}).encode())
    range_scan = st.tuples(st.integers(-5, 20), st.integers(-5, 20)).map(
        lambda ab: json.dumps({"functionId": "square", "start": ab[0], "stop": ab[1]}).encode())
    return st.one_of(call_list, call_list, range_scan, st.just(b"{}"), st.just(b"null"), RAW_BYTES, HUGE_BYTES)


def field_value(field, depth: int, valid: bool) -> st.SearchStrategy[bytes]:
    n = field.number
    t = field.type
    if t == FD.TYPE_MESSAGE:
        return message_bytes(field.message_type, depth + 1, valid).map(lambda b: length_delimited(n, b))
    if t == FD.TYPE_STRING:
        return string_value(field, valid).map(lambda b: length_delimited(n, b))
    if t == FD.TYPE_BYTES:
        value = payload_value() if field.name in ("payload", "config") else st.one_of(RAW_BYTES, HUGE_BYTES)
        return value.map(lambda b: length_delimited(n, b))
    if t == FD.TYPE_DOUBLE:
        return st.floats(allow_nan=True).map(lambda x: tag(n, 1) + struct.pack("<d", x))
    if valid and t == FD.TYPE_BOOL:
        return st.booleans().map(lambda v: tag(n, 0) + varint(int(v)))
    if valid and t == FD.TYPE_ENUM:
        known = st.sampled_from([v.number for v in field.enum_type.values])
        return st.one_of(known, known, known, INTS).map(lambda v: tag(n, 0) + varint(v))
    if valid:
        small = st.integers(0, 3_000)
        return st.one_of(small, small, small, INTS).map(lambda v: tag(n, 0) + varint(v))
    return INTS.map(lambda v: tag(n, 0) + varint(v))       # ints, enums (any number), bools


def wrong_field() -> st.SearchStrategy[bytes]:
    """An unknown field number, or a known number with any wire type."""
    return st.one_of(
        st.tuples(st.integers(1, 40), INTS).map(lambda p: tag(p[0], 0) + varint(p[1])),
        st.tuples(st.integers(1, 40), RAW_BYTES).map(lambda p: length_delimited(p[0], p[1])),
        st.tuples(st.integers(1, 40), st.binary(min_size=8, max_size=8)).map(lambda p: tag(p[0], 1) + p[1]),
    )


MAX_DEPTH = 6


def message_bytes(desc, depth: int = 0, valid: bool = True) -> st.SearchStrategy[bytes]:
    """A serialized ``desc``. ``valid``: each field present (3 times in 4) or not, in order, with a
    value of its type (a oneof may carry several: the last wins, as the format says);
    else any fields in any order with any value, unknown fields and wrong wire types."""
    if depth > MAX_DEPTH or not desc.fields:
        return st.just(b"")
    if valid:
        present = [st.one_of(*[st.deferred(lambda f=f: field_value(f, depth, True))] * 3, st.just(b""))
                   for f in desc.fields]
        repeated = [st.lists(st.deferred(lambda f=f: field_value(f, depth, True)), max_size=3).map(b"".join)
                    for f in desc.fields if f.is_repeated]
        return st.tuples(*present, *repeated).map(b"".join)
    fields = st.one_of(*(st.deferred(lambda f=f: field_value(f, depth, False)) for f in desc.fields))
    parts = st.lists(st.one_of(fields, fields, fields, wrong_field()), max_size=6 if depth < 3 else 3)
    return parts.map(b"".join)


# Requests a client would send, so the fuzzer also drives tasks through their states.
TASK = st.builds(
    lambda tid, payload, timeout, policy, iid: pb.Task(
        task_id=tid, function_call=pb.FunctionCallConfig(type="callList", payload=payload),
        task_timeout_ms=timeout, call_failure_policy=policy, instance_id=iid),
    st.sampled_from(TASK_IDS), payload_value(), st.sampled_from([0, 100, 3000, 5000]),
    st.sampled_from([0, 1, 2]), st.sampled_from(["", "a", "b"]))
SUBMIT = st.builds(lambda t, slot: pb.SubmitTaskRequest(task=t, slot_id=slot), TASK,
                   st.sampled_from(["", "", "slot-0", "slot-1"]))
SLOT = st.builds(lambda tid, ttl: pb.RequestTaskSlotRequest(task_id=tid, ttl_ms=ttl),
                 st.sampled_from(TASK_IDS), st.sampled_from([0, 100, 5000]))
IDS = st.lists(st.sampled_from(TASK_IDS), min_size=1, max_size=3)
SESSION_REQUEST = st.one_of(
    st.builds(lambda rid, r, f: pb.SessionRequest(request_id=rid, submit=r, follow=f),
              st.integers(0, 2**64 - 1), SUBMIT, st.booleans()),
    st.builds(lambda rid, r: pb.SessionRequest(request_id=rid, request_slot=r), st.integers(0, 9), SLOT),
    st.builds(lambda rid, i: pb.SessionRequest(request_id=rid, get_result=pb.GetTaskResultRequest(task_id=i)),
              st.integers(0, 9), st.sampled_from(TASK_IDS)),
    st.builds(lambda rid, ids: pb.SessionRequest(request_id=rid, watch=pb.WatchTasksRequest(task_ids=ids)),
              st.integers(0, 9), IDS),
    st.builds(lambda rid, i, why: pb.SessionRequest(request_id=rid, cancel=pb.CancelTaskRequest(task_id=i, reason=why)),
              st.integers(0, 9), st.sampled_from(TASK_IDS), st.text(max_size=20)),
    st.just(pb.SessionRequest(request_id=1)))
WELL_FORMED = {
    "SubmitTask": SUBMIT,
    "RequestTaskSlot": SLOT,
    "GetTaskResult": st.sampled_from(TASK_IDS).map(lambda i: pb.GetTaskResultRequest(task_id=i)),
    "GetTaskTrace": st.sampled_from(TASK_IDS).map(lambda i: pb.GetTaskTraceRequest(task_id=i)),
    "CancelTask": st.sampled_from(TASK_IDS).map(lambda i: pb.CancelTaskRequest(task_id=i)),
    "ListTasks": st.builds(lambda n, ph: pb.ListTasksRequest(page_size=n, phases=ph),
                           st.integers(-2, 2000), st.lists(st.sampled_from(["CALLS", "TERMINAL", "x"]), max_size=2)),
    "WatchTasks": IDS.map(lambda ids: pb.WatchTasksRequest(task_ids=ids)),
    "TaskSession": st.lists(SESSION_REQUEST, max_size=5).map(lambda rs: pb.SessionRequestBatch(requests=rs)),
}


def request_bytes(method) -> st.SearchStrategy[bytes]:
    """A request of ``method``: one a client would send, or built from the
    descriptor (well typed, or wild), or random bytes."""
    ways = [message_bytes(method.input_type, valid=True), message_bytes(method.input_type, valid=False),
            st.binary(max_size=200)]
    if method.name in WELL_FORMED:
        sent = WELL_FORMED[method.name].map(lambda m: m.SerializeToString())
        ways = [sent, sent, *ways]
    return st.one_of(*ways)


# ---- calling the worker with raw bytes ---------------------------------------------------

def code_of(err: grpc.RpcError) -> grpc.StatusCode:
    return err.code()


def call_unary(channel, name: str, raw: bytes):
    try:
        channel.unary_unary(PATH + name)(raw, timeout=UNARY_TIMEOUT)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as err:
        return code_of(err), err.details()


def call_stream(channel, name: str, raw, client_streaming: bool):
    """(status, SessionError codes seen)."""
    errors = []
    try:
        if client_streaming:
            it = channel.stream_stream(PATH + name)(iter(raw), timeout=STREAM_TIMEOUT)
        else:
            it = channel.unary_stream(PATH + name)(raw, timeout=STREAM_TIMEOUT)
        for msg in it:
            if name == "TaskSession":
                for ev in pb.SessionEventBatch.FromString(msg).events:
                    if ev.WhichOneof("event") == "error":
                        errors.append((ev.error.code, ev.error.message))
        return grpc.StatusCode.OK, "", errors
    except grpc.RpcError as err:
        return code_of(err), err.details(), errors


@pytest.fixture(scope="module")
def fuzz_worker(tmp_path_factory):
    """One worker for the whole fuzz run: short TTLs and deadlines, so nothing the
    fuzzer starts holds a slot for long."""
    from tests.e2e.conftest import make_functions_dir
    w = WorkerProcess({"TASK_SLOTS": "32", "MAX_SLOT_TTL_MS": "5000", "MAX_TASK_TIMEOUT_MS": "4000",
                       "TASK_DEADLINE_MS": "4000", "RESULT_RETENTION_MS": "30000"},
                      functions_dir=make_functions_dir(tmp_path_factory.mktemp("fn")))
    w.start()
    try:
        yield w
    finally:
        w.stop()


FUZZ = settings(deadline=None, database=None, derandomize=False, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture, HealthCheck.large_base_example])

UNARY = [m for m in SERVICE.methods if not m.client_streaming and not m.server_streaming]


@pytest.mark.parametrize("name", [m.name for m in UNARY])
def test_fuzz_unary(fuzz_worker, name):
    method = METHODS[name]

    @settings(FUZZ, max_examples=400)
    @given(raw=request_bytes(method))
    def one(raw):
        code, details = call_unary(fuzz_worker.channel, name, raw)
        SEEN[name, code.name] += 1
        assert code in ALLOWED, (name, code, details[:300], raw[:200])
        assert len(details) < 2048, (name, len(details))

    one()


def test_fuzz_watch_tasks(fuzz_worker):
    method = METHODS["WatchTasks"]

    @settings(FUZZ, max_examples=250)
    @given(raw=request_bytes(method))
    def one(raw):
        code, details, _ = call_stream(fuzz_worker.channel, "WatchTasks", raw, False)
        SEEN["WatchTasks", code.name] += 1
        assert code in STREAM_ALLOWED, (code, details[:300], raw[:200])

    one()


def test_fuzz_task_session(fuzz_worker):
    method = METHODS["TaskSession"]

    @settings(FUZZ, max_examples=500)
    @given(batches=st.lists(request_bytes(method), min_size=0, max_size=3))
    def one(batches):
        code, details, errors = call_stream(fuzz_worker.channel, "TaskSession", batches, True)
        SEEN["TaskSession", code.name] += 1
        for num, _ in errors:
            SEEN["TaskSession/error", num] += 1
        assert code in STREAM_ALLOWED, (code, details[:300], [b[:100] for b in batches])
        for num, message in errors:
            assert num in ALLOWED_NUMBERS, (num, message[:300])
            assert len(message) < 2048

    one()


def test_the_worker_still_serves_after_the_fuzzing(fuzz_worker):
    """Runs last in this module: healthy, alive, no unexpected error logged, and a
    normal task succeeds (once the fuzzer's tasks and reservations let a slot go)."""
    w = fuzz_worker
    assert w.proc.poll() is None
    assert w.health() == 1                       # SERVING
    deadline = time.monotonic() + 30
    while True:
        try:
            w.submit_calls("after-fuzz", [("add", [40, 2])])
            break
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and time.monotonic() < deadline, err
            time.sleep(0.2)
    res = w.wait_terminal("after-fuzz")
    assert res.state == pb.TASK_STATE_SUCCEEDED and outputs(res) == [42]
    bad = [line for line in w.lines if "unexpected error" in line or "Traceback" in line
           or '"level": "ERROR"' in line or '"level":"ERROR"' in line]
    assert not bad, bad[:5]
    longest = max(len(line) for line in w.lines)
    assert longest < 8192, f"a {longest}-character line in the worker's log"
    # The fuzzer reached past the decoder: requests were accepted and refused by the
    # worker's own checks, not only by the wire format (when this module ran whole).
    if SEEN:
        for method in ("RequestTaskSlot", "SubmitTask", "GetTaskResult"):
            assert SEEN[method, "OK"] > 0 and SEEN[method, "INVALID_ARGUMENT"] > 0, (method, SEEN)
        assert SEEN["GetTaskResult", "NOT_FOUND"] > 0 and SEEN["TaskSession", "OK"] > 0, SEEN
        print("fuzz answers:", dict(sorted(SEEN.items(), key=str)))
