"""The audit gate on a real worker: AUDIT_MODE=enforce refuses code
whose digest is not approved, runs approved code, and picks up an approval
added while it runs; warn dispatches and logs once per digest."""
import hashlib
import os
import time

import pytest

from blockx.worker.v1 import worker_pb2 as pb
from tests.e2e.test_faults import _metric
from tests.support.worker import outputs


def digest_of(functions_dir, name):
    return hashlib.sha256((functions_dir / f"{name}.py").read_bytes()).hexdigest()


@pytest.fixture
def allowlist(tmp_path, functions_dir):
    path = tmp_path / "approved.txt"
    path.write_text(f"# approved code\n{digest_of(functions_dir, 'add')} CR-101\n")
    return path


def test_enforce_rejects_unapproved_code_and_takes_new_approvals(start_worker, functions_dir, allowlist):
    w = start_worker({"AUDIT_MODE": "enforce", "AUDIT_ALLOWLIST_FILE": str(allowlist)}, executors=1)
    w.submit_calls("t-ok", [("add", [1, 2])])
    assert outputs(w.wait_terminal("t-ok")) == [3]
    deadline = time.monotonic() + 10    # the executor logs what it ran (its stderr may lag the result)
    while not any("under audit approval CR-101" in line for line in w.lines):
        assert time.monotonic() < deadline, "no executor log line naming the approval"
        time.sleep(0.05)
    square = digest_of(functions_dir, "square")
    w.submit_calls("t-no", [("square", [3])], retry=(3, 5, 0))
    res = w.wait_terminal("t-no")
    assert res.state == pb.TASK_STATE_FAILED and res.failure_code == "CALL_FAILED", res
    assert "failed after 1 attempt(s): AUDIT_REJECTED: " in res.failure_message, res.failure_message
    assert "'square'" in res.failure_message and square in res.failure_message
    assert res.retryable is False and res.statistic.call_retries == 0
    assert _metric(w, "blockx_audit_rejections_total") == 1
    # An approval added at run time holds for new tasks.
    loads = len(w.events_named("audit_allowlist_loaded"))
    time.sleep(0.01)
    with open(allowlist, "a") as f:
        f.write(f"{square} CR-102\n")
    deadline = time.monotonic() + 10
    while len(w.events_named("audit_allowlist_loaded")) == loads:
        assert time.monotonic() < deadline, "the allowlist was not re-read"
        time.sleep(0.05)
    w.submit_calls("t-now", [("square", [3])])
    assert outputs(w.wait_terminal("t-now")) == [9]


def test_warn_runs_unapproved_code_and_logs_it_once(start_worker, functions_dir, allowlist):
    w = start_worker({"AUDIT_MODE": "warn", "AUDIT_ALLOWLIST_FILE": str(allowlist)}, executors=1)
    w.submit_calls("t-warn", [("square", [i]) for i in range(5)] + [("add", [1, 1])])
    assert outputs(w.wait_terminal("t-warn")) == [0, 1, 4, 9, 16, 2]
    warned = w.events_named("audit_unapproved")
    assert [e["function_id"] for e in warned] == ["square"], warned
    assert warned[0]["digest"] == digest_of(functions_dir, "square")


def test_enforce_without_an_allowlist_is_a_configuration_error(start_worker):
    with pytest.raises(AssertionError, match=r"auditMode \(AUDIT_MODE\) is 'enforce' but auditAllowlistFile"):
        start_worker({"AUDIT_MODE": "enforce"}, ready=False)
