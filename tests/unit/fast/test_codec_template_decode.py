"""The decoder's template path: a frame written by one of the template encoders
(ExecuteCall, CallCompleted, ResumeCall with a result, CallWaiting(subcall), and
CallWaiting(io) as the executor writes it) is
decoded without orjson for its envelope. The result must be exactly orjson's:
the same keys in the same order and the same values of the same types (True is
not 1, 1.0 is not 1), for any field values; a frame that only looks like a
template (an escape, a non-ASCII byte, a float in an int's place, whitespace,
keys in another order, a bad value, deep nesting) is decoded by orjson whole,
with orjson's verdict. Checked against the twin, which always uses orjson, and
against orjson itself."""

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blockx._fast import compiled, twin

C = compiled("codec")
T = twin("codec")
DIGEST = "sha256:3f0a5c1e9b7d2a4c6e8f01234567890abcdef0123456789abcdef0123456789a"


def typed(x):
    """A value as nested tuples that tell apart key order, True from 1 and 1.0 from 1."""
    if type(x) is dict:
        return ("dict", tuple((k, typed(v)) for k, v in x.items()))
    if type(x) is list:
        return ("list", tuple(typed(v) for v in x))
    return (type(x).__name__, x)


def exact(frames):
    return [(typed(env), side) for env, side in frames]


def decode(mod, data):
    try:
        return ("ok", exact(mod.FrameDecoder().feed(data)))
    except Exception as exc:  # noqa: BLE001 - compared below
        return ("err", type(exc), str(exc))


def same_as_twin(data):
    got = decode(C, data)
    assert got == decode(T, data), data
    return got


def body_of(frame: bytes) -> bytes:
    return frame[4:]


def frame_of(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def test_each_template_decodes_to_orjsons_envelope_with_interned_keys():
    frames = [
        C.encode_execute_call("t/1", "t", "add", DIGEST, "", b"[3,17]", "", 0, 1),
        C.encode_call_completed("t/1", "t", 1, b'{"a":[1,2.5,"x",null,true]}', 0, 1764600000000, 3),
        C.encode_resume_result("t/1", "7", "subcall", b"42", 2),
        C.encode_call_waiting_subcall("t/1", "7", "t", 1, "add", b"[3,17]", 0, b'["t/1"]'),
    ]
    for frame in frames:
        (env, side), = C.FrameDecoder().feed(frame)
        want = orjson.loads(body_of(frame))
        assert side is None and typed(env) == typed(want)
        assert list(env) == list(want) and list(env["payload"]) == list(want["payload"])
        # The keys are the interned strings the readers look up.
        for key in list(env) + list(env["payload"]):
            assert key is __import__("sys").intern(key)
        assert same_as_twin(frame)[0] == "ok"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 63), 2 ** 64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4),
    max_leaves=12)
texts = st.text(max_size=10)
ints = st.integers(0, 2 ** 63 - 1)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts, texts, texts, texts, json_values, texts, ints, ints)
def test_execute_call_any_fields(call_id, task_id, fn, entry, args, parent, budget, attempt):
    frame = C.encode_execute_call(call_id, task_id, fn, DIGEST, entry, orjson.dumps(args), parent,
                                  budget, attempt)
    got = same_as_twin(frame)
    assert got == ("ok", [(typed(orjson.loads(body_of(frame))), None)])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts, texts, ints, json_values, ints, ints, ints)
def test_call_completed_any_fields(call_id, task_id, attempt, output, used, started, duration):
    frame = C.encode_call_completed(call_id, task_id, attempt, orjson.dumps(output), used, started,
                                    duration)
    assert same_as_twin(frame)[0] == "ok"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts, texts, texts, json_values, ints)
def test_resume_result_any_fields(call_id, request_id, kind, result, used):
    frame = C.encode_resume_result(call_id, request_id, kind, orjson.dumps(result), used)
    assert same_as_twin(frame)[0] == "ok"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts, texts, texts, ints, texts, json_values, ints, st.lists(texts, max_size=3))
def test_call_waiting_subcall_any_fields(call_id, request_id, task_id, attempt, fn, args, granted,
                                         ancestry):
    frame = C.encode_call_waiting_subcall(call_id, request_id, task_id, attempt, fn, orjson.dumps(args),
                                          granted, orjson.dumps(ancestry))
    assert same_as_twin(frame)[0] == "ok"


LOOKALIKES = [
    # the same fields with a float, a negative int, a 19-digit int, "-0", a leading zero
    b'{"messageType":"CallCompleted","callId":"c","requestId":"","payload":{"taskId":"t",'
    b'"attemptSeq":1.0,"output":1,"budgetUsedMs":0,"startedAtMs":0,"durationMs":0}}',
    b'{"messageType":"CallCompleted","callId":"c","requestId":"","payload":{"taskId":"t",'
    b'"attemptSeq":-3,"output":-0,"budgetUsedMs":1234567890123456789,"startedAtMs":0,"durationMs":0}}',
    b'{"messageType":"CallCompleted","callId":"c","requestId":"","payload":{"taskId":"t",'
    b'"attemptSeq":01,"output":1,"budgetUsedMs":0,"startedAtMs":0,"durationMs":0}}',
    # an escape, DEL, a non-ASCII byte, a control byte in a string
    b'{"messageType":"ResumeCall","callId":"c\\"q","requestId":"r","payload":{"resumeKind":"subcall",'
    b'"result":1,"budgetUsedMs":0}}',
    b'{"messageType":"ResumeCall","callId":"c\x7f","requestId":"r","payload":{"resumeKind":"subcall",'
    b'"result":1,"budgetUsedMs":0}}',
    '{"messageType":"ResumeCall","callId":"ü","requestId":"r","payload":{"resumeKind":"subcall",'
    '"result":1,"budgetUsedMs":0}}'.encode(),
    b'{"messageType":"ResumeCall","callId":"c\x01","requestId":"r","payload":{"resumeKind":"subcall",'
    b'"result":1,"budgetUsedMs":0}}',
    # whitespace, keys in another order, a missing or an extra field
    b'{"messageType":"ResumeCall", "callId":"c","requestId":"r","payload":{"resumeKind":"subcall",'
    b'"result":1,"budgetUsedMs":0}}',
    b'{"messageType":"ResumeCall","requestId":"r","callId":"c","payload":{"resumeKind":"subcall",'
    b'"result":1,"budgetUsedMs":0}}',
    b'{"messageType":"ResumeCall","callId":"c","requestId":"r","payload":{"resumeKind":"subcall",'
    b'"result":1}}',
    b'{"messageType":"ResumeCall","callId":"c","requestId":"r","payload":{"resumeKind":"subcall",'
    b'"result":1,"budgetUsedMs":0,"x":1}}',
    # raw values: invalid, unterminated, a trailing comma, deeply nested, odd but valid
    b'{"messageType":"ResumeCall","callId":"c","requestId":"r","payload":{"resumeKind":"subcall",'
    b'"result":[1,,2],"budgetUsedMs":0}}',
    b'{"messageType":"ResumeCall","callId":"c","requestId":"r","payload":{"resumeKind":"subcall",'
    b'"result":"abc,"budgetUsedMs":0}}',
    b'{"messageType":"ResumeCall","callId":"c","requestId":"r","payload":{"resumeKind":"subcall",'
    b'"result":[1,],"budgetUsedMs":0}}',
    b'{"messageType":"ResumeCall","callId":"c","requestId":"r","payload":{"resumeKind":"subcall",'
    b'"result":' + b"[" * 1030 + b"]" * 1030 + b',"budgetUsedMs":0}}',
    b'{"messageType":"ResumeCall","callId":"c","requestId":"r","payload":{"resumeKind":"subcall",'
    b'"result":' + b"[" * 300 + b"]" * 300 + b',"budgetUsedMs":0}}',
    b'{"messageType":"ResumeCall","callId":"c","requestId":"r","payload":{"resumeKind":"subcall",'
    b'"result":' + b"[" * 250 + b"]" * 250 + b',"budgetUsedMs":0}}',
    b'{"messageType":"ResumeCall","callId":"c","requestId":"r","payload":{"resumeKind":"subcall",'
    b'"result":{"a":"}\\"]","b":[{}]},"budgetUsedMs":0}}',
    b'{"messageType":"ResumeCall","callId":"c","requestId":"r","payload":{"resumeKind":"subcall",'
    b'"result":1e400,"budgetUsedMs":0}}',
    b'{"messageType":"ResumeCall","callId":"c","requestId":"r","payload":{"resumeKind":"subcall",'
    b'"result":true,"budgetUsedMs":0}}',
    b'{"messageType":"ResumeCall","callId":"c","requestId":"r","payload":{"resumeKind":"subcall",'
    b'"result":1,"budgetUsedMs":0}} ',
    b'{"messageType":"ResumeCall","callId":"c","requestId":"r","payload":{"resumeKind":"subcall",'
    b'"result":1,"budgetUsedMs":0}}}',
    # CallWaiting(io) as the executor writes it, and with its fields out of place
    b'{"messageType":"CallWaiting","callId":"c","requestId":"r","payload":{"taskId":"t","attemptSeq":1,'
    b'"waitKind":"io","backend":"echo","request":{"k":["v",1]}}}',
    b'{"messageType":"CallWaiting","callId":"c","requestId":"r","payload":{"taskId":"t","attemptSeq":1,'
    b'"waitKind":"io","request":{"k":["v",1]},"backend":"echo"}}',
    b'{"messageType":"CallWaiting","callId":"c","requestId":"r","payload":{"taskId":"t","attemptSeq":1,'
    b'"waitKind":"io","backend":"echo","request":{"k":["v",1]}},"x":1}',
    # CallWaiting with another waitKind in the subcall template's place
    b'{"messageType":"CallWaiting","callId":"c","requestId":"r","payload":{"taskId":"t","attemptSeq":1,'
    b'"waitKind":"subcalls","functionId":"f","args":[],"grantedBudgetMs":0,"ancestry":[]}}',
]


@pytest.mark.parametrize("body", LOOKALIKES, ids=range(len(LOOKALIKES)))
def test_lookalikes_get_orjsons_verdict(body):
    got = same_as_twin(frame_of(body))
    try:
        want = orjson.loads(body)
    except orjson.JSONDecodeError:
        assert got[0] == "err"
    else:
        assert got == ("ok", [(typed(want), None)])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts, texts, texts, ints, texts, json_values)
def test_call_waiting_io_any_fields(call_id, request_id, task_id, attempt, backend, request):
    from blockx.protocol import messages as m
    frame = C.encode_frame(m.call_waiting_io(call_id, request_id, task_id, attempt, backend, request))
    assert same_as_twin(frame)[0] == "ok"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_template_frames_agree_with_the_twin(data):
    frame = data.draw(st.sampled_from([
        C.encode_execute_call("t/1", "t", "add", DIGEST, "", b"[3,17]", "", 0, 1),
        C.encode_call_completed("t/1", "t", 1, b'{"a":[1,"}",null]}', 0, 1764600000000, 3),
        C.encode_resume_result("t/1", "7", "subcall", b'"x"', 2),
        C.encode_call_waiting_subcall("t/1", "7", "t", 1, "add", b"[3,17]", 0, b'["t/1"]'),
        frame_of(b'{"messageType":"CallWaiting","callId":"c","requestId":"r","payload":{"taskId":"t",'
                 b'"attemptSeq":1,"waitKind":"io","backend":"echo","request":{"k":["v",1]}}}'),
    ]))
    body = bytearray(body_of(frame))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(body) - 1))
        op = data.draw(st.integers(0, 2))
        if op == 0:
            body[i] = data.draw(st.sampled_from(b'{}[],:"\\ 0159-.eEtfnu\x00\x7f\xc3'))
        elif op == 1:
            del body[i]
        else:
            body[i:i] = data.draw(st.sampled_from([b",", b"]", b'"', b"1", b" ", b'\\"', b"{}"]))
    same_as_twin(frame_of(bytes(body)))
