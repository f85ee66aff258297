"""Why a call failed, as its user sees it, from a real Worker with real executors:
the traceback of the user's code (a failed subcall's first, as the direct cause)
and the innermost user frame's locals in the TaskResult, the trace, the CLI
(stderr under the JSON; --compact keeps one line) and blockx.client
(TaskOutcome.result() raises TaskFailed); the child's own error kind in
SubcallError; every failure message saying each thing once; a submit answered
with an earlier run saying so; a tall result summarized on a terminal."""
from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from blockx.client import TaskFailed, connect
from blockx.worker.v1 import worker_pb2 as pb
from tests.support.failure_messages import doubled_prefix
from tests.support.worker import outputs

pytestmark = pytest.mark.e2e

BLOCKX = Path(sys.executable).with_name("blockx")
CAUSE = "The above exception was the direct cause of the following exception:"


def _cli(worker, *args, timeout=60):
    return subprocess.run([str(BLOCKX), *args, "--addr", f"127.0.0.1:{worker.port}"],
                          capture_output=True, text=True, timeout=timeout)


def _nested(worker, task_id):
    worker.submit_calls(task_id, [("nested_quota", [1])])
    return worker.wait_terminal(task_id)


def test_the_result_holds_the_chained_traceback_and_redacted_locals(worker):
    r = _nested(worker, "tb-result")
    assert r.failure_code == "CALL_FAILED"
    assert r.failure_message == ("call tb-result/0 (function nested_quota) failed after 1 attempt(s): "
                                 "SUBCALL_FAILED: subcall over_quota (tb-result/0/sub-1) failed: QUOTA: "
                                 "SDKError: over quota: 10 of 5 units")
    assert r.failure_call_id == "tb-result/0"
    tb = r.failure_traceback
    child = tb.index('raise sdk.SDKError(f"over quota: {used} of 5 units", error_kind="QUOTA")')
    assert child < tb.index(CAUSE) < tb.index('return sdk.call("over_quota"')
    assert "<blockx-fn over_quota@" in tb and "<blockx-fn nested_quota@" in tb
    assert "blockx_executor/" not in tb and "/blockx/" not in tb      # no Worker or executor frames
    assert tb.rstrip().splitlines()[-1].endswith("failed: QUOTA: SDKError: over quota: 10 of 5 units")
    locals_ = {v.name: v.value for v in r.failure_locals}
    assert locals_ == {"n": "1", "password": "<redacted>", "budget": "{'units': 5}"}


def test_a_call_that_failed_without_user_code_has_no_traceback(worker):
    worker.submit("tb-timeout", "callList", {"calls": [{"functionId": "sleep_ms", "args": [3000]}]},
                  timeout_ms=200)
    r = worker.wait_terminal("tb-timeout")
    assert r.failure_code == "TIMED_OUT"
    assert r.failure_call_id == "" and r.failure_traceback == "" and not r.failure_locals


def test_the_childs_own_kind_reaches_the_parent(worker):
    worker.submit_calls("tb-kind", [("quota_kind", [1])])
    r = worker.wait_terminal("tb-kind")
    [out] = outputs(r)
    assert out["errorKind"] == "SUBCALL_FAILED"
    assert out["childErrorKind"] == "QUOTA"              # not SUBCALL_FAILED: the child's own
    assert out["message"].startswith("subcall over_quota (tb-kind/0/sub-")
    assert out["message"].endswith(" failed: QUOTA: SDKError: over quota: 10 of 5 units")


def test_the_trace_names_the_call_and_holds_its_traceback(worker):
    _nested(worker, "tb-trace")
    with connect(f"127.0.0.1:{worker.port}") as c:
        events = c.trace("tb-trace").events()
    [task] = [e for e in events if e.get("cat") == "task"]
    args = task["args"]
    assert args["failureCode"] == "CALL_FAILED" and args["failureCallId"] == "tb-trace/0"
    assert CAUSE in args["failureTraceback"] and len(args["failureTraceback"]) <= 8 * 1024
    assert args["failureLocals"]["password"] == "<redacted>"


def test_the_client_raises_task_failed_with_the_remote_traceback(worker):
    with connect(f"127.0.0.1:{worker.port}") as c:
        outcome = c.submit([("nested_quota", [1])])
        assert outcome.state == "FAILED" and outcome.failure_locals["password"] == "<redacted>"
        with pytest.raises(TaskFailed) as info:
            outcome.result()
        assert c.submit([("add", [1, 2])]).result() == [3]
    text = str(info.value)
    assert text.startswith(f"task {outcome.task_id} failed: CALL_FAILED: call {outcome.task_id}/0 ")
    assert "Remote traceback (call" in text and CAUSE in text
    assert "password = <redacted>" in text
    assert info.value.outcome is outcome and info.value.remote_traceback == outcome.failure_traceback


def test_cli_submit_prints_the_traceback_under_the_failure(worker):
    out = _cli(worker, "submit", "--calls", "nested_quota:1", "--task-id", "tb-cli")
    assert out.returncode == 3, out.stderr
    res = json.loads(out.stdout)["result"]                 # stdout stays JSON
    assert res["failureCallId"] == "tb-cli/0" and CAUSE in res["failureTraceback"]
    err = out.stderr
    assert err.startswith("task tb-cli FAILED: CALL_FAILED: call tb-cli/0 (function nested_quota) failed")
    assert "\nRemote traceback (call tb-cli/0):\nTraceback (most recent call last):\n" in err
    assert err.index("over_quota@") < err.index(CAUSE) < err.index("nested_quota@")
    assert "  password = <redacted>" in err
    compact = _cli(worker, "result", "tb-cli", "--compact")
    assert compact.returncode == 3
    assert len(compact.stdout.splitlines()) == 1 and compact.stderr == ""    # one line, nothing more
    again = _cli(worker, "result", "tb-cli")
    assert again.returncode == 3 and "Remote traceback (call tb-cli/0)" in again.stderr


def test_a_resubmit_says_it_returns_an_earlier_run(worker):
    first = _cli(worker, "submit", "--calls", "add:1,2", "--task-id", "tb-again", "--compact")
    assert first.returncode == 0 and first.stderr == ""
    second = _cli(worker, "submit", "--calls", "add:1,2", "--task-id", "tb-again", "--compact")
    assert second.returncode == 0
    assert json.loads(second.stdout)["result"]["outputs"] == [3]          # the same result, unchanged
    accepted = json.loads(first.stdout)["result"]["statistic"]["acceptedAtMs"]
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(accepted / 1000))
    assert second.stderr.startswith(f"note: task tb-again already ran (accepted {stamp}, finished ")
    assert "nothing ran now" in second.stderr


# ---- every failure message says each thing once ---------------------------------------

def test_the_rule_catches_the_doubled_prefixes_it_is_for():
    assert doubled_prefix("callList: callList: calls[0].args is missing") is not None
    assert doubled_prefix("subcall 'quota' failed: SUBCALL_FAILED: subcall quota (t/0/sub-9) failed: "
                          "QUOTA: over") is not None
    assert doubled_prefix("call t/0 (function deep) failed after 1 attempt(s): SUBCALL_FAILED: subcall deep "
                          "(t/0/sub-1) failed: SUBCALL_FAILED: subcall deep (t/0/sub-1/sub-1) failed: "
                          "USER_ERROR: ValueError: x") is None
    assert doubled_prefix("USER_ERROR: ZeroDivisionError: division by zero") is None


FAILING = {
    "nested": ("callList", {"calls": [{"functionId": "nested_quota", "args": [1]}]}),
    "direct": ("callList", {"calls": [{"functionId": "over_quota", "args": [1]}]}),
    "user_error": ("callList", {"calls": [{"functionId": "fail", "args": ["boom"]}]}),
    "own_kind": ("callList", {"calls": [{"functionId": "fail_kind", "args": ["CUSTOM"]}]}),
    "args_missing": ("callList", {"calls": [{"functionId": "add"}]}),
    "calls_missing": ("callList", {}),
    "no_builder": ("noSuchBuilder", {}),
    "no_function": ("callList", {"calls": [{"functionId": "no_such_function", "args": []}]}),
    "no_subcall_function": ("callList", {"calls": [{"functionId": "call_missing", "args": []}]}),
    "too_deep": ("callList", {"calls": [{"functionId": "deep", "args": [20]}]}),
    "continue_all_failed": ("callList", {"calls": [{"functionId": "fail", "args": ["a"]},
                                                   {"functionId": "fail", "args": ["b"]}]}),
    "dbscan_no_table": ("dbscan", {"query": "SELECT * FROM no_such_table", "functionId": "echo"}),
    "dbscan_write": ("dbscan", {"query": "DELETE FROM t RETURNING 1", "functionId": "echo"}),
    "dbscan_unknown_source": ("dbscan", {"source": "nope", "query": "SELECT 1", "functionId": "echo"}),
    "dbscan_bad_args": ("dbscan", {"query": "SELECT 1", "functionId": "echo", "args": "rows"}),
    "dbscan_unknown_key": ("dbscan", {"query": "SELECT 1", "functionId": "echo", "limit": 1}),
}


@pytest.mark.parametrize("case", sorted(FAILING))
def test_every_failure_message_says_each_thing_once(worker, case):
    builder, payload = FAILING[case]
    tid = f"tb-once-{case}"
    policy = pb.CALL_FAILURE_POLICY_CONTINUE if case == "continue_all_failed" else 0
    resp = worker.submit(tid, builder, payload, policy=policy)
    r = resp.result if resp.state == pb.TASK_STATE_FAILED else worker.wait_terminal(tid)
    assert r.state == pb.TASK_STATE_FAILED and r.failure_message
    said = [r.failure_message] + [line for line in r.failure_traceback.splitlines()
                                  if line and not line.startswith(" ") and not line.startswith("Traceback")]
    for message in said:
        assert doubled_prefix(message) is None, (doubled_prefix(message), message)
    if case == "continue_all_failed":       # "all 2 calls failed; first: call .../0 ...": that call's
        assert r.failure_message.startswith(f"all 2 calls failed; first: call {tid}/0 (function fail)")
        assert r.failure_call_id == f"{tid}/0" and "RuntimeError: a" in r.failure_traceback


# ---- a tall result on a terminal --------------------------------------------------------

def _on_a_terminal(args, rows=24, cols=100, timeout=60.0) -> tuple[int, str]:
    """Run the CLI with its stdout on a pty of rows x cols; its exit code and what it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([str(BLOCKX), *args], stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    while True:
        assert time.monotonic() < deadline, "the CLI did not finish"
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:         # the pty closed: the CLI exited
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=10)
    os.close(master)
    return proc.returncode, b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")


def test_a_result_taller_than_the_terminal_is_summarized(worker):
    calls = [f"--calls=add1:{i}" for i in range(60)]
    rc, screen = _on_a_terminal(["submit", "--addr", f"127.0.0.1:{worker.port}", "--task-id", "tb-tall",
                                 *calls])
    assert rc == 0
    assert "task tb-tall: SUCCEEDED, 60 output(s)" in screen
    assert "calls: 60 root calls (callCount; subcalls not counted), 0 failed" in screen
    assert "  [0] 1" in screen and "  [59] 60" not in screen
    assert "more output(s) not shown: add --json (or --outputs all)" in screen
    assert '"outputs"' not in screen                          # no flood of JSON
    rc, screen = _on_a_terminal(["result", "tb-tall", "--addr", f"127.0.0.1:{worker.port}", "--outputs", "5"])
    assert rc == 0 and "outputs (the first 5 of 60):" in screen and "  [4] 5" in screen
    rc, screen = _on_a_terminal(["result", "tb-tall", "--addr", f"127.0.0.1:{worker.port}", "--json"])
    assert rc == 0 and json.loads(screen)["result"]["outputs"] == list(range(1, 61))
    piped = _cli(worker, "result", "tb-tall")                # a pipe: the whole JSON, as before
    assert json.loads(piped.stdout)["result"]["outputs"] == list(range(1, 61))
    rc, screen = _on_a_terminal(["result", "tb-tall", "--addr", f"127.0.0.1:{worker.port}", "--outputs", "all"])
    assert rc == 0 and json.loads(screen)["result"]["outputsTotal"] == 60


def test_a_short_result_on_a_terminal_is_the_json(worker):
    rc, screen = _on_a_terminal(["submit", "--addr", f"127.0.0.1:{worker.port}", "--calls", "add:1,2"])
    assert rc == 0
    assert json.loads(screen[screen.index("{"):])["result"]["outputs"] == [3]
