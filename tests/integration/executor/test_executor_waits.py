"""Suspension and resumption: io (JSON and binary sidecar), subcalls, sleep,
budgets and cancellation."""

from blockx.protocol import messages as m

from . import functions as fn


def test_io_json_wait_and_resume(make_worker):
    w = make_worker({"io": fn.IO_JSON})
    w.execute("c1", "io", [7], attempt=2, task="task-io")
    env, sidecar = w.expect(m.CALL_WAITING, "c1")
    p = env["payload"]
    assert sidecar is None and env["requestId"]
    assert p == {"taskId": "task-io", "attemptSeq": 2, "waitKind": "io", "backend": "devstub",
                 "request": {"op": "echo", "x": 7}}
    w.send(m.resume_call_result("c1", env["requestId"], "io", {"echo": 7}))
    env, _ = w.expect(m.CALL_COMPLETED, "c1")
    assert env["payload"]["output"] == {"got": {"echo": 7}}


def test_io_binary_sidecar_both_directions(make_worker):
    w = make_worker({"iob": fn.IO_BINARY})
    key = bytes(range(256))
    w.execute("c1", "iob", [key.hex()])
    env, sidecar = w.expect(m.CALL_WAITING, "c1")
    assert env["payload"]["request"] == {"op": "get"}
    assert sidecar == key
    answer = b"\x00\xffprotobuf\x00" * 100
    w.send(m.resume_call_result("c1", env["requestId"], "io", {"found": True}), answer)
    env, _ = w.expect(m.CALL_COMPLETED, "c1")
    assert env["payload"]["output"] == {"result": {"found": True}, "body": answer.hex()}


def test_io_binary_without_response_body(make_worker):
    w = make_worker({"iob": fn.IO_BINARY})
    w.execute("c1", "iob", ["00"])
    env, _ = w.expect(m.CALL_WAITING, "c1")
    w.send(m.resume_call_result("c1", env["requestId"], "io", None))
    assert w.expect(m.CALL_COMPLETED, "c1")[0]["payload"]["output"] == {
        "result": None, "body": None}


def test_io_json_call_refuses_a_binary_answer(make_worker):
    w = make_worker({"io": fn.IO_JSON})
    w.execute("c1", "io", [1])
    env, _ = w.expect(m.CALL_WAITING, "c1")
    w.send(m.resume_call_result("c1", env["requestId"], "io", {}), b"raw")
    p = w.expect(m.CALL_FAILED, "c1")[0]["payload"]
    assert p["errorKind"] == "IO_ERROR" and "sdk.io_bytes()" in p["errorMessage"]


def test_io_error_propagates_kind_and_retryable(make_worker):
    w = make_worker({"io": fn.IO_JSON})
    w.execute("c1", "io", [1])
    env, _ = w.expect(m.CALL_WAITING, "c1")
    w.send(m.resume_call_error("c1", env["requestId"], "io", "IO_ERROR", "backend down", True))
    p = w.expect(m.CALL_FAILED, "c1")[0]["payload"]
    assert p["errorKind"] == "IO_ERROR" and p["retryable"] is True
    assert "backend down" in p["errorMessage"]
    assert "IOCallError" in p["errorStack"]


def test_io_error_can_be_caught(make_worker):
    w = make_worker({"ioc": fn.IO_CATCH})
    w.execute("c1", "ioc", [])
    env, _ = w.expect(m.CALL_WAITING, "c1")
    w.send(m.resume_call_error("c1", env["requestId"], "io", "IO_ERROR", "nope", False))
    assert w.expect(m.CALL_COMPLETED, "c1")[0]["payload"]["output"] == {
        "caught": "IO_ERROR", "retryable": False}


def test_subcall_wait_and_resume(make_worker):
    w = make_worker({"sub": fn.SUBCALL, "add": fn.ADD})
    w.execute("root", "sub", [4], budget_ms=5000, attempt=1)
    env, _ = w.expect(m.CALL_WAITING, "root")
    p = env["payload"]
    assert p["waitKind"] == "subcall" and p["functionId"] == "add" and p["args"] == [4, 1]
    assert p["ancestry"] == ["root"]
    assert 0 < p["grantedBudgetMs"] <= 5000
    # The Worker runs the child on the parent's executor and resumes the parent.
    w.execute("root/sub-1", "add", [4, 1], parent="root", budget_ms=p["grantedBudgetMs"])
    child, _ = w.expect(m.CALL_COMPLETED, "root/sub-1")
    assert child["payload"]["output"] == 5
    w.send(m.resume_call_result("root", env["requestId"], "subcall", 5, budget_used_ms=1200))
    done, _ = w.expect(m.CALL_COMPLETED, "root")
    assert done["payload"]["output"] == 50
    assert done["payload"]["budgetUsedMs"] >= 1200  # the child's budget is charged


def test_nested_subcall_ancestry(make_worker):
    w = make_worker({"sub": fn.SUBCALL})
    w.execute("root", "sub", [1])
    env, _ = w.expect(m.CALL_WAITING, "root")
    assert env["payload"]["grantedBudgetMs"] == 0  # unlimited parent -> unlimited child
    w.execute("root/sub-1", "sub", [2], parent="root")
    env2, _ = w.expect(m.CALL_WAITING, "root/sub-1")
    assert env2["payload"]["ancestry"] == ["root", "root/sub-1"]


def test_subcall_error_raises_subcall_failed_with_child_retryable(make_worker):
    w = make_worker({"sub": fn.SUBCALL})
    w.execute("root", "sub", [4])
    env, _ = w.expect(m.CALL_WAITING, "root")
    w.send(m.resume_call_error("root", env["requestId"], "subcall", "USER_ERROR",
                               "ValueError: boom", True))
    p = w.expect(m.CALL_FAILED, "root")[0]["payload"]
    assert p["errorKind"] == "SUBCALL_FAILED" and p["retryable"] is True
    assert "subcall 'add' failed: USER_ERROR: ValueError: boom" in p["errorMessage"]


def test_subcall_over_budget_fails_parent(make_worker):
    w = make_worker({"sub": fn.SUBCALL})
    w.execute("root", "sub", [4], budget_ms=1000)
    env, _ = w.expect(m.CALL_WAITING, "root")
    w.send(m.resume_call_result("root", env["requestId"], "subcall", 5, budget_used_ms=1500))
    p = w.expect(m.CALL_FAILED, "root")[0]["payload"]
    assert p["errorKind"] == "BUDGET_EXCEEDED" and p["retryable"] is False
    assert p["budgetUsedMs"] >= 1500


def test_sleeping_calls_interleave(make_worker):
    w = make_worker({"sleep": fn.SLEEP})
    w.execute("long", "sleep", [600])
    w.execute("short", "sleep", [20])
    first, _ = w.expect(m.CALL_COMPLETED)
    second, _ = w.expect(m.CALL_COMPLETED)
    assert (first["callId"], second["callId"]) == ("short", "long")
    assert second["payload"]["output"] == "woke"
    assert second["payload"]["budgetUsedMs"] >= 600  # sleep counts against the budget


def test_budget_exceeded_while_sleeping(make_worker):
    w = make_worker({"sleep": fn.SLEEP})
    w.execute("c1", "sleep", [5000], budget_ms=150)
    env, _ = w.expect(m.CALL_FAILED, "c1", timeout=3)
    p = env["payload"]
    assert p["errorKind"] == "BUDGET_EXCEEDED" and p["retryable"] is False
    assert 150 <= p["budgetUsedMs"] < 5000
    assert "budget of 150 ms" in p["errorMessage"]
    assert "sdk.sleep(ms)" in p["errorStack"]  # where the call was when it ran out


PREEMPT = ("--budget-preempt-ms", "50")


def test_cpu_spin_is_preempted_when_its_budget_runs_out(make_worker):
    w = make_worker({"spin": fn.SPIN, "add": fn.ADD}, extra_args=PREEMPT)
    w.execute("c1", "spin", [5000], budget_ms=100)
    p = w.expect(m.CALL_FAILED, "c1", timeout=4)[0]["payload"]
    assert p["errorKind"] == "BUDGET_EXCEEDED" and p["retryable"] is False
    assert 100 <= p["budgetUsedMs"] < 5000
    assert "while time.monotonic() < end" in p["errorStack"] or "n += 1" in p["errorStack"]
    w.execute("c2", "add", [1, 2])  # the executor carries on
    assert w.expect(m.CALL_COMPLETED, "c2")[0]["payload"]["output"] == 3


def test_cpu_spin_without_preemption_fails_when_it_finishes(make_worker):
    w = make_worker({"spin": fn.SPIN})  # default: no preemption (the budget is checked when a call waits or ends)
    w.execute("c1", "spin", [300], budget_ms=100)
    p = w.expect(m.CALL_FAILED, "c1")[0]["payload"]
    assert p["errorKind"] == "BUDGET_EXCEEDED" and p["retryable"] is False
    assert p["budgetUsedMs"] >= 300


def test_budget_exceeded_while_waiting_for_io_and_late_resume_dropped(make_worker):
    w = make_worker({"io": fn.IO_JSON, "add": fn.ADD})
    w.execute("c1", "io", [1], budget_ms=150)
    env, _ = w.expect(m.CALL_WAITING, "c1")
    p = w.expect(m.CALL_FAILED, "c1", timeout=3)[0]["payload"]
    assert p["errorKind"] == "BUDGET_EXCEEDED" and p["budgetUsedMs"] >= 150
    w.send(m.resume_call_result("c1", env["requestId"], "io", {"late": True}))
    w.execute("c2", "add", [1, 1])
    env, _ = w.expect(m.CALL_COMPLETED, "c2")  # the late resume produced nothing
    assert env["payload"]["output"] == 2


def test_budget_excludes_time_queued_before_start(make_worker):
    w = make_worker({"sleep": fn.SLEEP, "add": fn.ADD}, max_inflight=1)
    w.execute("a", "sleep", [400])
    w.execute("b", "add", [1, 2], budget_ms=100)  # queued ~400 ms behind a
    assert w.expect(m.CALL_COMPLETED, "a")[0]["payload"]["output"] == "woke"
    p = w.expect(m.CALL_COMPLETED, "b")[0]["payload"]
    assert p["output"] == 3 and p["budgetUsedMs"] < 100


def test_cancel_waiting_call(make_worker):
    w = make_worker({"io": fn.IO_JSON, "add": fn.ADD})
    w.execute("c1", "io", [1], attempt=2)
    env, _ = w.expect(m.CALL_WAITING, "c1")
    w.send(m.cancel_call("c1", 1, "stale attempt"))  # other attempt: ignored
    w.no_frame(0.2)
    w.send(m.cancel_call("c1", 2, "task deadline"))
    p = w.expect(m.CALL_FAILED, "c1")[0]["payload"]
    assert p["errorKind"] == "CANCELLED" and p["retryable"] is False
    assert p["attemptSeq"] == 2 and "task deadline" in p["errorMessage"]
    w.send(m.resume_call_result("c1", env["requestId"], "io", {}))  # late: dropped
    w.execute("c2", "add", [2, 2])
    assert w.expect(m.CALL_COMPLETED, "c2")[0]["payload"]["output"] == 4


def test_cancel_is_reported_even_if_user_code_swallows_it(make_worker):
    w = make_worker({"sw": fn.SWALLOW_CANCEL})
    w.execute("c1", "sw", [])
    w.expect(m.CALL_WAITING, "c1")
    w.send(m.cancel_call("c1", 1, "stop"))
    p = w.expect(m.CALL_FAILED, "c1")[0]["payload"]
    assert p["errorKind"] == "CANCELLED"


def test_cancel_queued_call(make_worker):
    w = make_worker({"io": fn.IO_JSON}, max_inflight=1)
    w.execute("a", "io", [1])
    env, _ = w.expect(m.CALL_WAITING, "a")
    w.execute("b", "io", [2])
    w.no_frame(0.2)  # b waits for a context
    w.send(m.cancel_call("b", 1, "not needed"))
    p = w.expect(m.CALL_FAILED, "b")[0]["payload"]
    assert p["errorKind"] == "CANCELLED" and p["budgetUsedMs"] == 0
    w.send(m.resume_call_result("a", env["requestId"], "io", 1))
    assert w.expect(m.CALL_COMPLETED, "a")[0]["payload"]["output"] == {"got": 1}


def test_preempted_call_that_swallows_the_exception_still_fails(make_worker):
    w = make_worker({"sw": fn.SPIN_SWALLOW}, extra_args=PREEMPT)
    w.execute("c1", "sw", [600], budget_ms=50)
    p = w.expect(m.CALL_FAILED, "c1")[0]["payload"]
    assert p["errorKind"] == "BUDGET_EXCEEDED"
    assert p["budgetUsedMs"] >= 600
