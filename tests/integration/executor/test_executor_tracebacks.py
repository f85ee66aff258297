"""A failed call's errorStack and localVars, from a real executor process: the
user's frames only, subcall failures chained like `raise ... from`, the child's
own error kind in SubcallError, locals bounded, repr-safe and redacted."""

from blockx.protocol import messages as m

SUBCALL_PLAIN = '''from blockx_executor import sdk

def main(n):
    return sdk.call("child", n)
'''

CATCH_KIND = '''from blockx_executor import sdk

def main(n):
    try:
        sdk.call("child", n)
    except sdk.SubcallError as exc:
        return {"kind": exc.error_kind, "child": exc.child_error_kind, "message": str(exc),
                "tb": exc.child_traceback}
'''

CONTEXT_CHAIN = '''from blockx_executor import sdk

def main(n):
    try:
        sdk.call("child", n)
    except sdk.SubcallError:
        return {}[n]
'''

SECRETS = '''class Bad:
    def __repr__(self):
        raise RuntimeError("no repr for you")

class Huge:
    def __repr__(self):
        return "h" * 1_000_000

def main(x):
    password = "hunter2"
    api_key = "AKIA-123"
    auth_token = "t0k3n"
    db_credentials = {"user": "u"}
    bad = Bad()
    huge = Huge()
    plain = x
    raise ValueError("boom")
'''

CHILD_STACK = ('Traceback (most recent call last):\n  File "<blockx-fn child abc>", line 4, in main\n'
               '    raise sdk.SDKError("over quota", error_kind="QUOTA")\n'
               'blockx_executor.sdk.SDKError: over quota\n')


def _child_failed(kind="QUOTA", stack=CHILD_STACK):
    return {"errorKind": "SUBCALL_FAILED", "retryable": False, "childErrorKind": kind,
            "errorMessage": f"subcall child (root/sub-1) failed: {kind}: SDKError: over quota",
            "childErrorStack": stack}


def _resume_error(call_id, request_id, error):
    return {"messageType": m.RESUME_CALL, "callId": call_id, "requestId": request_id,
            "payload": {"resumeKind": "subcall", "error": error, "budgetUsedMs": 0}}


def test_child_error_kind_reaches_subcall_error(make_worker):
    w = make_worker({"p": CATCH_KIND})
    w.execute("root", "p", [1])
    env, _ = w.expect(m.CALL_WAITING, "root")
    w.send(_resume_error("root", env["requestId"], _child_failed()))
    out = w.expect(m.CALL_COMPLETED, "root")[0]["payload"]["output"]
    assert out["kind"] == "SUBCALL_FAILED"
    assert out["child"] == "QUOTA"                        # the child's own kind, not SUBCALL_FAILED
    assert out["message"] == "subcall child (root/sub-1) failed: QUOTA: SDKError: over quota"
    assert out["tb"] == CHILD_STACK


def test_parent_traceback_chains_the_childs_and_says_it_once(make_worker):
    w = make_worker({"p": SUBCALL_PLAIN})
    w.execute("root", "p", [1])
    env, _ = w.expect(m.CALL_WAITING, "root")
    w.send(_resume_error("root", env["requestId"], _child_failed()))
    p = w.expect(m.CALL_FAILED, "root")[0]["payload"]
    assert p["errorKind"] == "SUBCALL_FAILED"
    # One prefix: the Worker's message names the subcall; nothing is said twice.
    assert p["errorMessage"] == "subcall child (root/sub-1) failed: QUOTA: SDKError: over quota"
    stack = p["errorStack"]
    child_at = stack.index("raise sdk.SDKError(\"over quota\"")
    cause_at = stack.index("The above exception was the direct cause of the following exception:")
    parent_at = stack.index('return sdk.call("child", n)')
    assert child_at < cause_at < parent_at               # the child first, as Python prints a cause
    # The executor's frames (the call runner above, the SDK below) are left out.
    assert "blockx_executor/" not in stack and "call.py" not in stack and "sdk.py" not in stack
    assert stack.rstrip().endswith("subcall child (root/sub-1) failed: QUOTA: SDKError: over quota")


def test_an_exception_raised_while_handling_a_subcall_error_shows_both(make_worker):
    w = make_worker({"p": CONTEXT_CHAIN})
    w.execute("root", "p", [1])
    env, _ = w.expect(m.CALL_WAITING, "root")
    w.send(_resume_error("root", env["requestId"], _child_failed()))
    p = w.expect(m.CALL_FAILED, "root")[0]["payload"]
    stack = p["errorStack"]
    assert p["errorMessage"] == "KeyError: 1"
    assert (stack.index("over quota") < stack.index("direct cause") < stack.index("sdk.call(\"child\", n)")
            < stack.index("During handling of the above exception") < stack.index("return {}[n]"))


def test_a_refused_subcall_names_itself_once(make_worker):
    """A subcall the Worker refused before it ran has no child kind: its errorKind is the reason."""
    w = make_worker({"p": CATCH_KIND})
    w.execute("root", "p", [1])
    env, _ = w.expect(m.CALL_WAITING, "root")
    w.send(m.resume_call_error("root", env["requestId"], "subcall", "FUNCTION_NOT_FOUND",
                               "no function 'child' in epoch 3", False))
    out = w.expect(m.CALL_COMPLETED, "root")[0]["payload"]["output"]
    assert out["child"] == "FUNCTION_NOT_FOUND"
    assert out["message"] == "subcall 'child' failed: FUNCTION_NOT_FOUND: no function 'child' in epoch 3"


def test_hostile_child_fields_are_bounded(make_worker):
    w = make_worker({"p": CATCH_KIND})
    w.execute("root", "p", [1])
    env, _ = w.expect(m.CALL_WAITING, "root")
    w.send(_resume_error("root", env["requestId"], {
        "errorKind": "SUBCALL_FAILED", "retryable": False, "errorMessage": "m" * 100_000,
        "childErrorKind": "K" * 10_000, "childErrorStack": "s" * 200_000}))
    out = w.expect(m.CALL_COMPLETED, "root")[0]["payload"]["output"]
    assert len(out["child"]) == 64
    assert len(out["message"]) <= 8 * 1024 and len(out["tb"]) <= 32 * 1024
    w.execute("root2", "p", [1])
    env, _ = w.expect(m.CALL_WAITING, "root2")
    w.send(_resume_error("root2", env["requestId"], {
        "errorKind": "SUBCALL_FAILED", "retryable": False, "errorMessage": "x",
        "childErrorKind": ["not", "a", "string"], "childErrorStack": {"no": 1}}))
    out = w.expect(m.CALL_COMPLETED, "root2")[0]["payload"]["output"]
    assert out["child"] == "SUBCALL_FAILED" and out["tb"] == ""


def test_locals_are_redacted_repr_safe_and_bounded(make_worker):
    w = make_worker({"s": SECRETS})
    w.execute("c1", "s", [7])
    p = w.expect(m.CALL_FAILED, "c1")[0]["payload"]
    lv = p["localVars"]
    for name in ("password", "api_key", "auth_token", "db_credentials"):
        assert lv[name] == "<redacted>", name
    assert "hunter2" not in str(p) and "AKIA-123" not in str(p) and "t0k3n" not in str(p)
    assert lv["bad"].startswith("<Bad instance at")        # its raising __repr__ is not called twice
    assert len(lv["huge"]) <= 200
    assert lv["plain"] == "7"


def test_a_subcall_the_worker_rejected_keeps_its_own_words(make_worker):
    """The dispatcher's refusal (too deep, a cycle) already starts "subcall f ...": not said twice."""
    w = make_worker({"p": CATCH_KIND})
    w.execute("root", "p", [1])
    env, _ = w.expect(m.CALL_WAITING, "root")
    w.send(m.resume_call_error("root", env["requestId"], "subcall", "SUBCALL_FAILED",
                               "subcall child would be at depth 8: its ancestry of 8 calls must be shorter "
                               "than maxSubcallDepth 8", False))
    out = w.expect(m.CALL_COMPLETED, "root")[0]["payload"]["output"]
    assert out["message"] == ("subcall child would be at depth 8: its ancestry of 8 calls must be shorter "
                              "than maxSubcallDepth 8")


RECURSE = '''def main(n):
    return main(n + 1)
'''


def test_a_runaway_recursion_keeps_the_innermost_frames_and_the_error(make_worker):
    w = make_worker({"r": RECURSE})
    w.execute("c1", "r", [0])
    p = w.expect(m.CALL_FAILED, "c1")[0]["payload"]
    assert p["errorMessage"].startswith("RecursionError: maximum recursion depth exceeded")
    stack = p["errorStack"]
    assert len(stack) <= 32 * 1024
    assert "Previous line repeated" in stack                 # collapsed as Python collapses it
    assert stack.rstrip().splitlines()[-1].startswith("RecursionError: maximum recursion depth exceeded")


IO_PLAIN = '''from blockx_executor import sdk

def main():
    return sdk.io("devstub", {"op": "echo"})
'''


def test_an_io_failure_says_its_kind_once(make_worker):
    """The call's errorKind is the backend's: the message does not repeat it."""
    w = make_worker({"io": IO_PLAIN})
    w.execute("c1", "io", [])
    env, _ = w.expect(m.CALL_WAITING, "c1")
    w.send(m.resume_call_error("c1", env["requestId"], "io", "IO_ERROR", "backend down", True))
    p = w.expect(m.CALL_FAILED, "c1")[0]["payload"]
    assert p["errorKind"] == "IO_ERROR" and p["retryable"] is True
    assert p["errorMessage"] == "IOCallError: IO request to backend 'devstub' failed: backend down"
