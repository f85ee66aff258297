"""ExecuteCall -> CallCompleted / CallFailed: function code, outputs, failures."""

import time

from blockx.protocol import messages as m

from . import functions as fn
from .fake_worker import digest_of


def test_execute_add(make_worker):
    w = make_worker({"add": fn.ADD})
    w.execute("c1", "add", [1, 2], attempt=3, task="task-9")
    env, sidecar = w.expect(m.CALL_COMPLETED, "c1")
    p = env["payload"]
    assert sidecar is None
    assert p["output"] == 3
    assert p["taskId"] == "task-9" and p["attemptSeq"] == 3
    assert abs(p["startedAtMs"] - time.time() * 1000) < 60_000
    # Budget is time the call ran, inside its wall-clock duration.
    assert type(p["budgetUsedMs"]) is int and 0 <= p["budgetUsedMs"] <= p["durationMs"] < 5_000


def test_function_code_fetched_once_then_cached(make_worker):
    w = make_worker({"add": fn.ADD})
    w.execute("c1", "add", [1, 2])
    assert w.expect(m.CALL_COMPLETED, "c1")[0]["payload"]["output"] == 3
    assert len(w.code_requests) == 1
    req = w.code_requests[0]
    assert req["callId"] == "c1" and req["requestId"]
    assert req["payload"]["waitKind"] == "function_code"
    assert req["payload"]["functionId"] == "add"
    assert req["payload"]["functionCodeDigest"] == digest_of(fn.ADD)
    assert req["payload"]["taskId"] == "task-1" and req["payload"]["attemptSeq"] == 1
    w.execute("c2", "add", [5, 6])
    assert w.expect(m.CALL_COMPLETED, "c2")[0]["payload"]["output"] == 11
    assert len(w.code_requests) == 1  # cache hit: no second function_code wait


def test_concurrent_calls_share_one_code_fetch(make_worker):
    w = make_worker({"add": fn.ADD}, auto_code=False)
    for i in range(3):
        w.execute(f"c{i}", "add", [i, i])
    env, _ = w.expect(m.CALL_WAITING, "c0")
    assert env["payload"]["waitKind"] == "function_code"
    w.no_frame(0.2)  # c1 and c2 wait on c0's fetch
    w.send(m.resume_function_code("c0", env["requestId"], fn.ADD, digest_of(fn.ADD)))
    outputs = {}
    for _ in range(3):
        env, _ = w.expect(m.CALL_COMPLETED)
        outputs[env["callId"]] = env["payload"]["output"]
    assert outputs == {"c0": 0, "c1": 2, "c2": 4}


def test_cancelled_fetcher_hands_the_fetch_to_the_next_waiter(make_worker):
    w = make_worker({"add": fn.ADD}, auto_code=False)
    w.execute("c0", "add", [1, 1])
    w.execute("c1", "add", [2, 2])
    first, _ = w.expect(m.CALL_WAITING, "c0")
    w.send(m.cancel_call("c0", 1, "test"))
    got = {}
    for _ in range(2):
        env, _ = w.next()
        got[(env["messageType"], env["callId"])] = env
    assert got[(m.CALL_FAILED, "c0")]["payload"]["errorKind"] == "CANCELLED"
    again = got[(m.CALL_WAITING, "c1")]
    assert again["payload"]["waitKind"] == "function_code"
    w.send(m.resume_function_code("c1", again["requestId"], fn.ADD, digest_of(fn.ADD)))
    assert w.expect(m.CALL_COMPLETED, "c1")[0]["payload"]["output"] == 4
    # The first fetch's late answer is harmless.
    w.send(m.resume_function_code("c0", first["requestId"], fn.ADD, digest_of(fn.ADD)))
    w.execute("c2", "add", [3, 3])
    assert w.expect(m.CALL_COMPLETED, "c2")[0]["payload"]["output"] == 6


def test_source_not_matching_digest_fails_function_not_found(make_worker):
    w = make_worker({"add": fn.ADD}, auto_code=False)
    w.execute("c1", "add", [1, 2])
    env, _ = w.expect(m.CALL_WAITING, "c1")
    tampered = fn.ADD + "# changed\n"
    w.send(m.resume_function_code("c1", env["requestId"], tampered, digest_of(fn.ADD)))
    env, _ = w.expect(m.CALL_FAILED, "c1")
    p = env["payload"]
    assert p["errorKind"] == "FUNCTION_NOT_FOUND" and p["retryable"] is False
    assert "does not match its digest" in p["errorMessage"]
    assert digest_of(tampered) in p["errorMessage"]


def test_code_fetch_error_fails_function_not_found(make_worker):
    w = make_worker({})
    w.execute("c1", "missing", [], digest="ab" * 32)
    env, _ = w.expect(m.CALL_FAILED, "c1")
    p = env["payload"]
    assert p["errorKind"] == "FUNCTION_NOT_FOUND" and p["retryable"] is False
    assert "no function missing" in p["errorMessage"]


def test_missing_entry_selector_fails_function_not_found(make_worker):
    w = make_worker({"other": fn.OTHER_ENTRY})
    w.execute("c1", "other", [4])
    env, _ = w.expect(m.CALL_FAILED, "c1")
    assert env["payload"]["errorKind"] == "FUNCTION_NOT_FOUND"
    assert "'main'" in env["payload"]["errorMessage"]
    w.execute("c2", "other", [4], entry="other")
    assert w.expect(m.CALL_COMPLETED, "c2")[0]["payload"]["output"] == 8


def test_user_exception_fields(make_worker):
    w = make_worker({"fail": fn.FAIL})
    w.execute("c1", "fail", [5])
    env, _ = w.expect(m.CALL_FAILED, "c1")
    p = env["payload"]
    assert p["errorKind"] == "USER_ERROR" and p["retryable"] is False
    assert p["errorMessage"] == "ValueError: bad x: 5"
    stack = p["errorStack"]
    assert stack.startswith("Traceback")
    assert 'raise ValueError(f"bad x: {x}")' in stack  # user source lines are shown
    assert "return helper(x)" in stack
    assert "blockx_executor" not in stack.splitlines()[1]  # starts at user code
    lv = p["localVars"]
    assert lv["x"] == "5" and lv["secret"] == "<redacted>"     # a name that says it holds a secret
    assert "outer" not in lv  # the innermost user frame only
    assert len(lv["big"]) <= 200 and len(lv["items"]) <= 200
    assert type(p["budgetUsedMs"]) is int and 0 <= p["budgetUsedMs"] < 5_000  # raised at once


def test_local_vars_are_capped(make_worker):
    w = make_worker({"many": fn.MANY_LOCALS})
    w.execute("c1", "many", [])
    p = w.expect(m.CALL_FAILED, "c1")[0]["payload"]
    assert p["errorMessage"] == "RuntimeError: many"
    assert len(p["localVars"]) == 20


def test_exception_with_retryable_attribute_is_retryable(make_worker):
    w = make_worker({"flaky": fn.RETRYABLE})
    w.execute("c1", "flaky", [])
    p = w.expect(m.CALL_FAILED, "c1")[0]["payload"]
    assert p["errorKind"] == "USER_ERROR" and p["retryable"] is True
    assert p["errorMessage"] == "Flaky: try again"


def test_syntax_error_is_a_user_error(make_worker):
    w = make_worker({"bad": fn.SYNTAX_ERROR})
    w.execute("c1", "bad", [])
    p = w.expect(m.CALL_FAILED, "c1")[0]["payload"]
    assert p["errorKind"] == "USER_ERROR"
    assert p["errorMessage"].startswith("SyntaxError")


def test_non_json_output(make_worker):
    w = make_worker({"nj": fn.NOT_JSON})
    w.execute("c1", "nj", [])
    p = w.expect(m.CALL_FAILED, "c1")[0]["payload"]
    assert p["errorKind"] == "OUTPUT_NOT_JSON" and p["retryable"] is False
    assert "not JSON-serialisable" in p["errorMessage"] and "set" in p["errorMessage"]


def test_non_string_keys_are_encoded_like_json_dumps(make_worker):
    w = make_worker({"ik": fn.INT_KEYS})
    w.execute("c1", "ik", [])
    assert w.expect(m.CALL_COMPLETED, "c1")[0]["payload"]["output"] == {
        "1": "a", "2": [1.5, None, True]}


def test_module_is_executed_once_per_digest(make_worker):
    w = make_worker({"counter": fn.COUNTER})
    outs = []
    for i in range(3):
        w.execute(f"c{i}", "counter", [])
        outs.append(w.expect(m.CALL_COMPLETED, f"c{i}")[0]["payload"]["output"])
    assert outs == [1, 2, 3]


def test_sdk_from_another_thread_raises(make_worker):
    w = make_worker({"t": fn.SDK_OUTSIDE})
    w.execute("c1", "t", [])
    out = w.expect(m.CALL_COMPLETED, "c1")[0]["payload"]["output"]
    assert len(out) == 1 and "must be called from a function running as a call" in out[0]


def test_context_variables_do_not_leak_between_calls(make_worker):
    w = make_worker({"cv": fn.CONTEXTVAR})
    for i in range(3):  # sequential calls reuse one pooled greenlet
        w.execute(f"c{i}", "cv", [f"v{i}"])
        assert w.expect(m.CALL_COMPLETED, f"c{i}")[0]["payload"]["output"] == "unset"


def test_invalid_sleep_is_a_user_error(make_worker):
    w = make_worker({"bs": fn.BAD_SLEEP})
    w.execute("c1", "bs", [])
    p = w.expect(m.CALL_FAILED, "c1")[0]["payload"]
    assert p["errorKind"] == "USER_ERROR" and p["errorMessage"].startswith("ValueError: sdk.sleep")


def test_source_with_utf8_bom(make_worker):
    w = make_worker({"bom": fn.BOM})
    w.execute("c1", "bom", [])
    assert w.expect(m.CALL_COMPLETED, "c1")[0]["payload"]["output"] == "bom ok"


def test_hostile_repr_and_str_do_not_break_failure_reporting(make_worker):
    w = make_worker({"hostile": fn.HOSTILE})
    w.execute("c1", "hostile", [])
    p = w.expect(m.CALL_FAILED, "c1")[0]["payload"]
    assert p["errorKind"] == "USER_ERROR"
    assert p["errorMessage"].startswith("Weird")
    assert "Bad" in p["localVars"]["thing"]  # reprlib names the object instead
