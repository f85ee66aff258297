"""call_failures: what an executor says about a failed call is bounded and
redacted at the Worker, a subcall's traceback waits for its parent's resume,
and only the call the task's failure message names explains the task."""
from blockx.adapters import call_failures as cf
from blockx.adapters.task_runtime import TaskRuntime


def _rt(task_id="t"):
    return TaskRuntime(task_id, "", 0)


def test_a_hostile_executor_cannot_flood_or_leak_through_the_result():
    rt = _rt()
    lv = {f"v{i}": "x" * 10_000 for i in range(1000)}
    lv.update({"password": "'hunter2'", 7: "not a name", "bad": ["not", "text"]})
    cf.note_call_failed(rt, "t/0", {"errorStack": "s" * 10_000_000, "localVars": lv}, True)
    d = rt.failure
    assert d.call_id == "t/0"
    assert len(d.traceback) <= cf.MAX_TRACEBACK_CHARS
    assert len(d.local_vars) == cf.MAX_LOCALS
    assert all(len(v) <= cf.MAX_LOCAL_VALUE for _, v in d.local_vars)
    rt2 = _rt()
    cf.note_call_failed(rt2, "t/1", {"errorStack": ["not text"], "localVars": {
        "db_password": "'hunter2'", "API_KEY": "'k'", "x": "1", "n" * 500: "2"}}, True)
    d2 = rt2.failure
    assert d2.traceback == ""
    assert dict(d2.local_vars) == {"db_password": "<redacted>", "API_KEY": "<redacted>", "x": "1",
                                   "n" * cf.MAX_LOCAL_NAME: "2"}
    rt3 = _rt()
    cf.note_call_failed(rt3, "t/0", {"errorStack": 42, "localVars": "not an object"}, True)
    assert rt3.failure is None


def test_the_first_final_root_failure_is_kept_and_only_for_the_call_named():
    rt = _rt()
    cf.note_call_failed(rt, "t/3", {"errorStack": "retried"}, False)     # a retry follows: not the decider
    assert rt.failure is None
    cf.note_call_failed(rt, "t/1", {"errorStack": "first"}, True)
    cf.note_call_failed(rt, "t/2", {"errorStack": "second"}, True)
    assert rt.failure.traceback == "first"
    msg = "call t/1 (function f) failed after 1 attempt(s): USER_ERROR: ValueError: x"
    assert cf.detail_for(rt, msg).traceback == "first"
    assert cf.detail_for(rt, "call t/10 (function f) failed") is None      # another call: never shown
    assert cf.detail_for(rt, "the task ran past its timeout") is None
    assert cf.detail_for(None, msg) is None


def test_a_subcalls_traceback_waits_for_its_parent_bounded():
    rt = _rt()
    runtimes = {"t": rt}
    cf.note_call_failed(rt, "t/0/sub-1", {"errorStack": "child tb"}, True)
    assert rt.failure is None                                         # a subcall never decides a task
    assert cf.take_child_stack(runtimes, "t/0/sub-1") == "child tb"
    assert cf.take_child_stack(runtimes, "t/0/sub-1") == ""           # handed over once
    assert cf.take_child_stack(runtimes, "other/0/sub-1") == ""
    for i in range(cf.MAX_PENDING_CHILDREN * 3):                      # parents that never took theirs
        cf.note_call_failed(rt, f"t/0/sub-{i + 2}", {"errorStack": "x"}, True)
    assert len(rt.child_stacks) == cf.MAX_PENDING_CHILDREN
