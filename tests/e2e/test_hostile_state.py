"""What a local user or a tenant learns or takes of the Worker's own state, against
real worker processes:

- a STATE_DIR another local user created (their directory, their files in it)
  is refused when the Worker starts, even when the config check never looked
  at it (a tokens file is set, so the generated token is not in play);
- a tenant's FUNCTION_NOT_FOUND shows neither the server's functions directory
  nor the other functions' ids, on every way a result reaches it (the SubmitTask
  reply, WatchTasks, GetTaskResult, a TaskSession, its GetTaskTrace), nor in
  the error its own code reads from a subcall; the admin identity and the
  Worker's log still see both."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc
from tests.e2e.conftest import make_functions_dir
from tests.support import auth
from tests.support.session import RawSession, call_list_task
from tests.support.worker import WorkerProcess, outputs

pytestmark = pytest.mark.e2e

ALICE = "alice-token-0123456789abcdef"
OTHER_UID = 65534
SUBCALL_MISSING = '''from blockx_executor import sdk


def main():
    try:
        sdk.call("no-such-fn", 1)
    except Exception as exc:          # the tenant's code reads the error and returns it
        return str(exc)
    return "called"
'''


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    d = tmp_path_factory.mktemp("tenant")
    fdir = make_functions_dir(d)
    (fdir / "subcall_missing.py").write_text(SUBCALL_MISSING)
    tokens = auth.write_tokens(d, {"alice": ALICE, "admin": auth.HARNESS_TOKEN})
    (d / "not-a-dir").write_text("")                 # a DuckDB file under it cannot be opened
    broken = f"{d}/not-a-dir/data.duckdb"
    proc = WorkerProcess({"WORKER_AUTH_TOKENS_FILE": tokens, "TASK_SLOTS": "8", "RESULT_RETENTION_MS": "60000",
                          "TRACE_ENABLED": "true", "STATE_DIR": str(d / "state"),
                          "BLOCKX_DATA_SOURCES": json.dumps({"broken": f"duckdb://{broken}"})},
                         functions_dir=fdir)
    proc.fdir, proc.duck = str(fdir), broken
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def stub(w, token):
    ch = auth.channel(f"127.0.0.1:{w.port}", token=token)
    return ch, pb_grpc.WorkerServiceStub(ch)


def call_list(task_id, calls):
    return pb.SubmitTaskRequest(task=call_list_task(task_id, calls))


def terminal(s, task_id, timeout=30):
    for upd in s.WatchTasks(pb.WatchTasksRequest(task_ids=[task_id]), timeout=timeout):
        if upd.is_terminal:
            return upd.result
    raise AssertionError(f"no terminal update for {task_id}")


def shows_server(text: str, fdir: str) -> list[str]:
    """What of the server's detail ``text`` shows: the functions dir, another function's id."""
    return [x for x in (fdir, "known:", "add1", "attack_attach") if x in text]


def session_result(w, token, task_id) -> str:
    async def run():
        s = RawSession(w.port, token=token)
        try:
            await s.send(pb.SessionRequest(request_id=1, get_result=pb.GetTaskResultRequest(task_id=task_id)))
            while True:
                ev = await s.next_event(10)
                if ev.request_id == 1:
                    assert ev.WhichOneof("event") == "result", ev
                    return ev.result.result.failure_message
        finally:
            await s.close()
    return asyncio.run(run())


def test_a_tenant_function_not_found_shows_no_server_path_nor_other_functions(w):
    ch, alice = stub(w, ALICE)
    try:
        alice.SubmitTask(call_list("alice-nf", [("no-such-fn", [1])]), timeout=10)
        seen = {"watch": terminal(alice, "alice-nf").failure_message,
                "get": alice.GetTaskResult(pb.GetTaskResultRequest(task_id="alice-nf"), timeout=10)
                .result.failure_message,
                "session": session_result(w, ALICE, "alice-nf")}
    finally:
        ch.close()
    for how, msg in seen.items():
        assert "'no-such-fn' not found in code epoch" in msg, (how, msg)      # still says what is wrong
        assert shows_server(msg, w.fdir) == [], (how, msg)
        assert "the worker's admin identity and its log" in msg
    admin = w.result("alice-nf").result.failure_message                       # the harness is admin
    assert w.fdir in admin and "known:" in admin and "attack_attach" in admin
    logged = w.find_event("task_finished", task_id="alice-nf")
    assert logged is not None and w.fdir in logged["failure_message"] and "attack_attach" in logged["failure_message"]


def test_a_tenant_data_source_error_shows_no_server_path(w):
    ch, alice = stub(w, ALICE)
    try:
        task = pb.Task(task_id="alice-db", function_call=pb.FunctionCallConfig(type="dbscan", payload=json.dumps(
            {"source": "broken", "query": "SELECT 1 AS a", "functionId": "echo"}).encode()))
        alice.SubmitTask(pb.SubmitTaskRequest(task=task), timeout=10)
        mine = terminal(alice, "alice-db")
    finally:
        ch.close()
    admin = w.result("alice-db").result
    assert admin.state == pb.TASK_STATE_FAILED and os.path.dirname(w.duck) in admin.failure_message, admin
    assert mine.failure_code == admin.failure_code and "<server path>" in mine.failure_message
    assert "not-a-dir" not in mine.failure_message, mine.failure_message


def test_a_tenant_trace_shows_no_server_detail(w):
    ch, alice = stub(w, ALICE)
    try:
        alice.SubmitTask(call_list("alice-tr", [("no-such-fn", [1])]), timeout=10)
        terminal(alice, "alice-tr")
        mine = alice.GetTaskTrace(pb.GetTaskTraceRequest(task_id="alice-tr"), timeout=10).chrome_trace_json.decode()
    finally:
        ch.close()
    assert "'no-such-fn' not found" in mine and shows_server(mine, w.fdir) == [], mine
    assert json.loads(mine)["otherData"]["taskId"] == "alice-tr"             # still a trace a viewer opens
    admin = w.stub.GetTaskTrace(pb.GetTaskTraceRequest(task_id="alice-tr"), timeout=10).chrome_trace_json.decode()
    assert w.fdir in admin and "attack_attach" in admin


def test_a_subcall_error_read_by_tenant_code_shows_no_server_detail(w):
    ch, alice = stub(w, ALICE)
    try:
        alice.SubmitTask(call_list("alice-sub", [("subcall_missing", [])]), timeout=10)
        res = terminal(alice, "alice-sub")
    finally:
        ch.close()
    assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
    [msg] = outputs(res)
    assert "'no-such-fn' not found" in msg and shows_server(msg, w.fdir) == [], msg
    ev = w.find_event("subcall_function_not_found")
    assert ev is not None and w.fdir in ev["message"]                          # the log keeps the detail


@pytest.mark.skipif(os.geteuid() != 0, reason="simulating another local user needs chown (root)")
def test_a_state_dir_another_user_created_is_refused_at_start(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "local.duckdb").write_bytes(b"")               # their file, where the Worker keeps its data
    os.chown(state / "local.duckdb", OTHER_UID, OTHER_UID)
    os.chmod(state, 0o755)
    os.chown(state, OTHER_UID, OTHER_UID)
    tokens = auth.write_tokens(tmp_path, {"admin": auth.HARNESS_TOKEN})
    wp = WorkerProcess({"WORKER_AUTH_TOKENS_FILE": tokens, "STATE_DIR": str(state)})
    env = {**wp.env, "BLOCKX_PROFILE": wp.profile}
    try:
        p = subprocess.run([sys.executable, "-m", "blockx", "serve"], env=env, capture_output=True, text=True,
                           timeout=30)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError("the worker started and served from another user's STATE_DIR") from exc
    assert p.returncode == 2, p.stderr[-2000:]
    assert f"STATE_DIR {str(state)!r} belongs to uid {OTHER_UID}" in p.stderr
    assert "not to the worker's user" in p.stderr and "0700" in p.stderr
