"""UDS messages: every constructor builds an envelope that survives the codec and
passes validation; every missing required key or wrong type is a ProtocolError
naming the message and the key; optional keys get their documented defaults."""

import copy

import orjson
import pytest

from blockx._fast import load
from blockx._fast.errors import ProtocolError
from blockx.protocol import messages as m

codec = load("codec")


def wire(env, sidecar=None):
    """What the peer decodes from `env`."""
    [(got, side)] = codec.FrameDecoder().feed(codec.encode_frame(env, sidecar))
    assert side == sidecar
    return got


SAMPLES = {
    "ExecuteCall": m.execute_call("c1", "t1", "add", "ab" * 32, [1, 2], 1),
    "ExecuteCallBatch": m.execute_call_batch([m.execute_call("c1", "t1", "add", "ab" * 32, [1, 2], 1),
                                              m.execute_call("c2", "t1", "add", "ab" * 32, [3, 4], 2)]),
    "ResumeCall/result": m.resume_call_result("c1", "r1", m.WAIT_IO, {"status": 200}, 12),
    "ResumeCall/error": m.resume_call_error("c1", "r1", m.WAIT_SUBCALL, m.SUBCALL_FAILED,
                                            "child failed", True, 3),
    "ResumeCall/function_code": m.resume_function_code("c1", "r1", "def main():\n  return 1\n",
                                                       "ab" * 32),
    "CancelCall": m.cancel_call("c1", 2, "task cancelled"),
    "HeartbeatAck": m.heartbeat_ack(),
    "CallWaiting/io": m.call_waiting_io("c1", "r1", "t1", 1, "devstub", {"op": "get"}),
    "CallWaiting/subcall": m.call_waiting_subcall("c1", "r2", "t1", 1, "mul", [3, 4], 500,
                                                  ["root", "c1"]),
    "CallWaiting/function_code": m.call_waiting_function_code("c1", "r3", "t1", 1, "add",
                                                              "ab" * 32),
    "CallCompleted": m.call_completed("c1", "t1", 1, {"sum": 3}, 4, 1000, 5),
    "CallFailed": m.call_failed("c1", "t1", 1, m.USER_ERROR, False, "ZeroDivisionError",
                                "Traceback...", {"x": "0"}, 2),
    "Heartbeat": m.heartbeat("exec-1", 4242, 7, 3, 5, 123, 50_000_000, 99, "c1", 10, 2, 100),
}


def test_message_type_sets():
    assert m.WORKER_TO_EXECUTOR == {"ExecuteCall", "ExecuteCallBatch", "ResumeCall", "CancelCall",
                                    "HeartbeatAck"}
    assert m.EXECUTOR_TO_WORKER == {"CallWaiting", "CallCompleted", "CallFailed", "Heartbeat"}
    assert m.WAIT_KINDS == {"io", "subcall", "function_code"} == m.RESUME_KINDS
    assert m.DEFAULT_RETRYABLE[m.EXECUTOR_LOST] and not m.DEFAULT_RETRYABLE[m.USER_ERROR]


@pytest.mark.parametrize("name", SAMPLES)
def test_constructed_messages_validate_after_the_wire(name):
    env = SAMPLES[name]
    assert env["messageType"] == name.split("/")[0]
    assert set(env) >= {"messageType", "callId", "requestId"}
    got = wire(env)
    direction = m.WORKER_TO_EXECUTOR if env["messageType"] in m.WORKER_TO_EXECUTOR \
        else m.EXECUTOR_TO_WORKER
    payload = m.validate(got, direction)
    assert payload == env.get("payload", {})
    assert got["payload"] is payload


def test_execute_call_defaults_and_fragment_args():
    env = m.execute_call("c", "t", "f", "d", orjson.Fragment(b'[1,{"a":[2]}]'), 3)
    p = env["payload"]
    assert (p["entrySelector"], p["parentCallId"], p["callBudgetMs"]) == ("main", "", 0)
    got = wire(env)
    assert m.validate(got)["args"] == [1, {"a": [2]}]


def test_io_sidecar_travels_next_to_the_envelope():
    env = m.resume_call_result("c", "r", m.WAIT_IO, {"status": 200, "bodyInSidecar": True})
    got = wire(env, b"\x00protobuf\xff")
    assert m.validate(got)["result"]["status"] == 200


def test_validate_fills_optional_defaults_in_place():
    env = {"messageType": "CallFailed", "callId": "c", "payload": {
        "taskId": "t", "attemptSeq": 1, "errorKind": "USER_ERROR", "retryable": False,
        "errorMessage": "boom"}}
    payload = m.validate(env)
    assert payload["errorStack"] == "" and payload["localVars"] == {}
    assert payload["budgetUsedMs"] == 0 and env["requestId"] == ""
    env = {"messageType": "Heartbeat", "payload": {
        "executorId": "e", "pid": 1, "seq": 1, "runnableCount": 0, "inflightCount": 0,
        "availableContexts": 4, "memoryBytes": 0, "lastSchedulerActiveAtMs": 0}}
    p = m.validate(env, m.EXECUTOR_TO_WORKER)
    assert (p["runningCallId"], p["cpuUserMs"], p["cpuSystemMs"], p["sentAtMs"]) == ("", 0, 0, 0)
    assert env["callId"] == ""
    assert m.validate({"messageType": "HeartbeatAck"}) == {}
    assert m.validate_payload("ExecuteCall", {
        "taskId": "t", "functionId": "f", "functionCodeDigest": "d", "args": [],
        "attemptSeq": 1, "entrySelector": None})["entrySelector"] == "main"


def required_cases():
    for name, env in SAMPLES.items():
        mt = env["messageType"]
        keys = [k for k, _ in m._REQUIRED[mt]]
        if mt == "CallWaiting":
            keys += [k for k, _ in m._WAIT_KIND_KEYS[env["payload"]["waitKind"]]]
        for key in keys:
            yield pytest.param(name, key, id=f"{name}-{key}")


@pytest.mark.parametrize("name,key", list(required_cases()))
def test_missing_required_key_is_a_protocol_error_naming_it(name, key):
    env = copy.deepcopy(SAMPLES[name])
    del env["payload"][key]
    with pytest.raises(ProtocolError, match=rf"{env['messageType']}.* missing required key '{key}'"):
        m.validate(env)


@pytest.mark.parametrize("name,key,bad,kind", [
    ("ExecuteCall", "attemptSeq", "1", "an integer"),
    ("ExecuteCall", "attemptSeq", True, "an integer"),
    ("ExecuteCall", "args", {"a": 1}, "an array"),
    ("ExecuteCall", "taskId", 5, "a string"),
    ("ExecuteCall", "callBudgetMs", 1.5, "an integer"),
    ("CallFailed", "retryable", "false", "a boolean"),
    ("CallFailed", "localVars", [], "an object"),
    ("Heartbeat", "runnableCount", None, "an integer"),
    ("CallWaiting/subcall", "ancestry", "root", "an array"),
    ("CallCompleted", "budgetUsedMs", -0.0, "an integer"),
])
def test_wrong_value_types_are_rejected(name, key, bad, kind):
    env = copy.deepcopy(SAMPLES[name])
    env["payload"][key] = bad
    with pytest.raises(ProtocolError, match=rf"'{key}' must be {kind}"):
        m.validate(env)


@pytest.mark.parametrize("env,pattern", [
    ([], r"envelope must be an object, got array"),
    ({"callId": "c"}, r"unknown messageType None"),
    ({"messageType": "Launch"}, r"unknown messageType 'Launch'"),
    ({"messageType": "ExecuteCall", "callId": "", "payload": {}}, r"needs a non-empty callId"),
    ({"messageType": "ExecuteCall", "callId": 5, "payload": {}}, r"callId must be a string"),
    ({"messageType": "CallWaiting", "callId": "c", "payload": {}},
     r"needs a non-empty requestId"),
    ({"messageType": "CallCompleted", "callId": "c", "payload": [1]},
     r"payload must be an object, got array"),
    ({"messageType": "CallCompleted", "callId": "c"}, r"payload must be an object, got null"),
    ({"messageType": "CallWaiting", "callId": "c", "requestId": "r", "payload": {
        "taskId": "t", "attemptSeq": 1, "waitKind": "sleep"}}, r"waitKind 'sleep' is not one of"),
    ({"messageType": "ResumeCall", "callId": "c", "requestId": "r", "payload": {
        "resumeKind": "io"}}, r"needs 'result' or 'error'"),
    ({"messageType": "ResumeCall", "callId": "c", "requestId": "r", "payload": {
        "resumeKind": "later", "result": 1}}, r"resumeKind 'later' is not one of"),
    ({"messageType": "ResumeCall", "callId": "c", "requestId": "r", "payload": {
        "resumeKind": "io", "result": 1, "error": {"errorKind": "IO_ERROR",
                                                   "errorMessage": "x", "retryable": True}}},
     r"both 'result' and 'error'"),
    ({"messageType": "ResumeCall", "callId": "c", "requestId": "r", "payload": {
        "resumeKind": "io", "error": {"errorKind": "IO_ERROR", "errorMessage": "x"}}},
     r"ResumeCall error is missing required key 'retryable'"),
    ({"messageType": "ResumeCall", "callId": "c", "requestId": "r", "payload": {
        "resumeKind": "io", "error": "boom"}}, r"'error' must be an object, got string"),
    ({"messageType": "ResumeCall", "callId": "c", "requestId": "r", "payload": {
        "resumeKind": "function_code", "result": "def main(): pass"}},
     r"function_code\) result must be an object"),
    ({"messageType": "ResumeCall", "callId": "c", "requestId": "r", "payload": {
        "resumeKind": "function_code", "result": {"source": "x"}}},
     r"missing required key 'functionCodeDigest'"),
    ({"messageType": "CallWaiting", "callId": "c", "requestId": "r", "payload": {
        "taskId": "t", "attemptSeq": 1, "waitKind": "subcall", "functionId": "f", "args": [],
        "grantedBudgetMs": 5, "ancestry": ["root", 7]}}, r"array of call id strings"),
])
def test_malformed_envelopes(env, pattern):
    with pytest.raises(ProtocolError, match=pattern):
        m.validate(env)


def test_direction_is_enforced():
    with pytest.raises(ProtocolError, match="not accepted in this direction"):
        m.validate(wire(SAMPLES["ExecuteCall"]), m.EXECUTOR_TO_WORKER)
    with pytest.raises(ProtocolError, match="not accepted in this direction"):
        m.validate(wire(SAMPLES["Heartbeat"]), m.WORKER_TO_EXECUTOR)


def test_unknown_extra_keys_are_kept():
    env = wire(SAMPLES["CallCompleted"])
    env["payload"]["audit"] = {"x": 1}
    env["future"] = True
    assert m.validate(env)["audit"] == {"x": 1}


def test_unknown_message_type_for_validate_payload():
    with pytest.raises(ProtocolError, match="unknown messageType 'Nope'"):
        m.validate_payload("Nope", {})
    assert issubclass(ProtocolError, ValueError) and ProtocolError.retryable is False


# ---- the CallCompleted fast path agrees with the general validator ----------------

from hypothesis import given, settings
from hypothesis import strategies as _st

_values = _st.one_of(_st.none(), _st.booleans(), _st.integers(-5, 5), _st.text(max_size=3),
                     _st.lists(_st.integers(), max_size=2), _st.dictionaries(_st.text(max_size=2), _st.integers(), max_size=2))


@_st.composite
def _completed_like(draw):
    env = m.call_completed("t/1", "t", 1, {"x": 1}, 3, 4, 5)
    p = env["payload"]
    for key in ("callId", "requestId", "messageType"):
        if draw(_st.integers(0, 5)) == 0:
            if draw(_st.booleans()):
                env.pop(key, None)
            else:
                env[key] = draw(_values)
    for key in ("taskId", "attemptSeq", "output", "budgetUsedMs", "startedAtMs", "durationMs", "extra"):
        if draw(_st.integers(0, 4)) == 0:
            if draw(_st.booleans()):
                p.pop(key, None)
            else:
                p[key] = draw(_values)
    if draw(_st.integers(0, 10)) == 0:
        env["payload"] = draw(_values)
    return env


def _outcome(fn, env, accept):
    env = copy.deepcopy(env)
    try:
        return ("ok", fn(env, accept), env)
    except m.ProtocolError as exc:
        return ("error", type(exc).__name__, None)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(_completed_like(), _st.sampled_from([None, m.EXECUTOR_TO_WORKER, m.WORKER_TO_EXECUTOR]))
def test_callcompleted_fast_path_matches_the_general_validator(env, accept):
    assert _outcome(m.validate, env, accept) == _outcome(m._validate, env, accept)


@_st.composite
def _execute_like(draw):
    env = m.execute_call("t/1", "t", "add", "d" * 8, [1, 2], 1, "main", "", 50)
    p = env["payload"]
    for key in ("callId", "requestId", "messageType"):
        if draw(_st.integers(0, 5)) == 0:
            if draw(_st.booleans()):
                env.pop(key, None)
            else:
                env[key] = draw(_values)
    for key in ("taskId", "functionId", "functionCodeDigest", "args", "attemptSeq", "entrySelector",
                "parentCallId", "callBudgetMs", "audit"):
        if draw(_st.integers(0, 4)) == 0:
            if draw(_st.booleans()):
                p.pop(key, None)
            else:
                p[key] = draw(_values)
    if draw(_st.integers(0, 10)) == 0:
        env["payload"] = draw(_values)
    return env


@settings(max_examples=400, deadline=None, derandomize=True)
@given(_execute_like(), _st.sampled_from([None, m.EXECUTOR_TO_WORKER, m.WORKER_TO_EXECUTOR]))
def test_executecall_fast_path_matches_the_general_validator(env, accept):
    assert _outcome(m.validate, env, accept) == _outcome(m._validate, env, accept)


def test_executecall_fast_path_takes_the_common_frame():
    env = {"messageType": "ExecuteCall", "callId": "c", "payload": {
        "taskId": "t", "functionId": "f", "functionCodeDigest": "d", "args": [], "attemptSeq": 1}}
    p = m._execute_fast(env, m.WORKER_TO_EXECUTOR)
    assert p == {"taskId": "t", "functionId": "f", "functionCodeDigest": "d", "args": [], "attemptSeq": 1,
                 "entrySelector": "main", "parentCallId": "", "callBudgetMs": 0}
    assert env["requestId"] == ""
    assert m._execute_fast(env, m.EXECUTOR_TO_WORKER) is None


# ---- ExecuteCallBatch: accepted whole or not at all -------------------------------

def test_execute_call_batch_items_are_validated_in_order_with_defaults():
    raw = wire(m.execute_call_batch([
        {"messageType": "ExecuteCall", "callId": "a", "payload": {
            "taskId": "t", "functionId": "f", "functionCodeDigest": "d", "args": [1], "attemptSeq": 1}},
        m.execute_call("b", "t", "f", "d", [2], 3, parent_call_id="a", call_budget_ms=9)]))
    payload = m.validate(raw, m.WORKER_TO_EXECUTOR)
    items = m.execute_call_batch_items(payload)
    assert [(e["callId"], e["requestId"], e["payload"]["args"], e["payload"]["entrySelector"],
             e["payload"]["parentCallId"], e["payload"]["callBudgetMs"]) for e in items] == [
        ("a", "", [1], "main", "", 0), ("b", "", [2], "main", "a", 9)]


@pytest.mark.parametrize("calls, pattern", [
    ([m.cancel_call("c1", 1)], r"element 0: messageType 'CancelCall' is not accepted"),
    ([m.execute_call("c1", "t", "f", "d", [], 1), 7], r"element 1: envelope must be an object"),
    ([m.execute_call("c1", "t", "f", "d", [], 1),
      {"messageType": "ExecuteCall", "callId": "c2", "payload": {"taskId": "t"}}],
     r"element 1: ExecuteCall payload is missing required key 'functionId'"),
    ([m.execute_call("", "t", "f", "d", [], 1)], r"element 0: ExecuteCall needs a non-empty callId"),
    ([m.execute_call_batch([])], r"element 0: messageType 'ExecuteCallBatch' is not accepted"),
])
def test_malformed_execute_call_batch_elements_name_the_element(calls, pattern):
    payload = m.validate(wire(m.execute_call_batch(calls)), m.WORKER_TO_EXECUTOR)
    with pytest.raises(ProtocolError, match=pattern):
        m.execute_call_batch_items(payload)


@pytest.mark.parametrize("calls", [None, {"a": 1}, "x", 3])
def test_execute_call_batch_calls_must_be_a_list(calls):
    env = {"messageType": "ExecuteCallBatch", "callId": "", "payload": {"calls": calls}}
    with pytest.raises(ProtocolError, match="calls"):
        m.validate(env, m.WORKER_TO_EXECUTOR)


def test_the_worker_never_accepts_an_execute_call_batch():
    with pytest.raises(ProtocolError, match="not accepted in this direction"):
        m.validate(wire(m.execute_call_batch([])), m.EXECUTOR_TO_WORKER)



_WAIT_RESUME_SAMPLES = [
    m.call_waiting_io("c1", "r1", "t1", 1, "devstub", {"op": "get"}),
    m.call_waiting_subcall("c1", "r2", "t1", 1, "mul", [3, 4], 500, ["root", "c1"]),
    m.call_waiting_function_code("c1", "r3", "t1", 1, "add", "ab" * 32),
    m.resume_call_result("c1", "r1", m.WAIT_IO, {"status": 200}, 12),
    m.resume_call_result("c1", "r1", m.WAIT_SUBCALL, 7),
    m.resume_call_error("c1", "r1", m.WAIT_SUBCALL, m.SUBCALL_FAILED, "child failed", True, 3),
    m.resume_function_code("c1", "r1", "def main():\n  return 1\n", "ab" * 32),
]
_WAIT_RESUME_KEYS = ("taskId", "attemptSeq", "waitKind", "backend", "request", "functionId", "args",
                     "grantedBudgetMs", "ancestry", "resumeKind", "result", "error", "budgetUsedMs", "extra")
_wr_values = _st.one_of(_values, _st.sampled_from(["io", "subcall", "function_code", "ResumeCall", "CallWaiting"]),
                        _st.lists(_st.one_of(_st.text(max_size=2), _st.integers()), max_size=2))


@_st.composite
def _wait_resume_like(draw):
    """A valid sample with zero, one or two keys changed (envelope or payload):
    close enough to valid that the fast path's every check gets exercised."""
    env = copy.deepcopy(draw(_st.sampled_from(_WAIT_RESUME_SAMPLES)))
    for _ in range(draw(_st.integers(0, 2))):
        if draw(_st.integers(0, 4)) == 0:
            target, key = env, draw(_st.sampled_from(["callId", "requestId", "messageType", "payload"]))
        else:
            target, key = env.get("payload"), draw(_st.sampled_from(_WAIT_RESUME_KEYS))
        if type(target) is not dict:
            continue
        if draw(_st.booleans()):
            target.pop(key, None)
        else:
            target[key] = draw(_wr_values)
    return env


@settings(max_examples=600, deadline=None, derandomize=True)
@given(_wait_resume_like(), _st.sampled_from([None, m.EXECUTOR_TO_WORKER, m.WORKER_TO_EXECUTOR]))
def test_wait_and_resume_fast_path_matches_the_general_validator(env, accept):
    assert _outcome(m.validate, env, accept) == _outcome(m._validate, env, accept)


def test_wait_and_resume_fast_path_takes_the_round_trip_frames():
    for env, accept in ((m.call_waiting_io("c", "r", "t", 1, "devstub", {"a": 1}), m.EXECUTOR_TO_WORKER),
                        (m.call_waiting_subcall("c", "r", "t", 1, "f", [1], 5, ["c"]), m.EXECUTOR_TO_WORKER),
                        (m.resume_call_result("c", "r", m.WAIT_IO, {"x": 1}), m.WORKER_TO_EXECUTOR)):
        env = wire(env)
        assert m._wait_resume_fast(env, accept) is env["payload"]
    env = wire(m.resume_call_result("c", "r", m.WAIT_SUBCALL, 1))
    del env["payload"]["budgetUsedMs"]
    assert m._wait_resume_fast(env, None)["budgetUsedMs"] == 0
    assert m._wait_resume_fast(wire(m.call_waiting_function_code("c", "r", "t", 1, "f", "d")), None) is None


def _changed(env, **payload_changes):
    env = copy.deepcopy(env)
    for key, value in payload_changes.items():
        if value is _DROP:
            env["payload"].pop(key, None)
        else:
            env["payload"][key] = value
    return env


_DROP = object()


@pytest.mark.parametrize("env", [
    _changed(_WAIT_RESUME_SAMPLES[1], ancestry=["root", 1]),
    _changed(_WAIT_RESUME_SAMPLES[1], ancestry="root"),
    _changed(_WAIT_RESUME_SAMPLES[1], grantedBudgetMs=True),
    _changed(_WAIT_RESUME_SAMPLES[1], args=_DROP),
    _changed(_WAIT_RESUME_SAMPLES[0], request=_DROP),
    _changed(_WAIT_RESUME_SAMPLES[0], waitKind="other"),
    _changed(_WAIT_RESUME_SAMPLES[3], error={"errorKind": "IO_ERROR"}),
    _changed(_WAIT_RESUME_SAMPLES[3], budgetUsedMs=1.5),
    _changed(_WAIT_RESUME_SAMPLES[3], resumeKind="function_code", result=[1]),
    _changed(_WAIT_RESUME_SAMPLES[4], result=_DROP),
    _changed(_WAIT_RESUME_SAMPLES[4], resumeKind="nope"),
    dict(_WAIT_RESUME_SAMPLES[3], requestId=""),
    dict(_WAIT_RESUME_SAMPLES[0], callId=""),
])
@pytest.mark.parametrize("accept", [None, m.EXECUTOR_TO_WORKER, m.WORKER_TO_EXECUTOR])
def test_wait_and_resume_fast_path_leaves_near_misses_to_the_general_validator(env, accept):
    assert _outcome(m.validate, env, accept) == _outcome(m._validate, env, accept)
    assert _outcome(m._validate, env, accept)[0] == "error"


@pytest.mark.parametrize("mt", [["CallWaiting"], {"a": 1}, 7, None])
def test_a_message_type_that_is_not_a_string_is_a_protocol_error(mt):
    env = {"messageType": mt, "callId": "c", "requestId": "r", "payload": {}}
    with pytest.raises(ProtocolError, match="unknown messageType"):
        m.validate(env)


def test_each_frame_type_takes_its_own_fast_path_with_the_general_result():
    # validate() routes by messageType: the fast path of another type never sees it,
    # and its answer is the one the general path gives.
    import copy
    frames = [
        m.execute_call("c", "t", "f", "d", [1], 1),
        m.resume_call_result("c", "r", m.WAIT_SUBCALL, {"x": 1}, 3),
        m.call_waiting_subcall("c", "r", "t", 1, "f", [1, 2], 0, ["p"]),
        m.call_completed("c", "t", 1, 5, 0),
    ]
    for env in frames:
        env = orjson.loads(orjson.dumps(env))
        slow = copy.deepcopy(env)
        assert m.validate(env) == m._validate(slow)
