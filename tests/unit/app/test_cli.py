import io
import json
import sys
import types
from concurrent import futures

import grpc
import pytest

from blockx import cli
from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc


def submit_ns(*argv):
    return cli.build_parser().parse_args(["submit", *argv])


# --- parsing and task construction -----------------------------------------------------------


@pytest.mark.parametrize("text,expected", [
    ("add:1,2", {"functionId": "add", "args": [1, 2]}),
    ("add", {"functionId": "add", "args": []}),
    ("add:", {"functionId": "add", "args": []}),
    ('echo:{"k":1}', {"functionId": "echo", "args": [{"k": 1}]}),
    ('echo:"a,b",[1,2]', {"functionId": "echo", "args": ["a,b", [1, 2]]}),
    ("f: null ", {"functionId": "f", "args": [None]}),
])   # a bare word ('echo:hello') or a space in the id (' f') is a usage error: tests/unit/cli
def test_parse_call(text, expected):
    assert cli.parse_call(text) == expected


def test_parse_call_needs_a_function_id():
    with pytest.raises(cli.UsageError, match="the function id is missing"):
        cli.parse_call(":1,2")


def test_task_from_calls_flags():
    ns = submit_ns("--calls", "add:1,2", "--calls", "add1:41", "--task-id", "t-1", "--result-handler", "test",
                   "--result-config", '{"expectCount": 2}', "--timeout-ms", "5000", "--policy", "continue",
                   "--max-attempts", "4", "--base-backoff-ms", "20", "--jitter-percent", "1",
                   "--instance-id", "tenant-a")
    t = cli.task_from_args(ns)
    assert t.task_id == "t-1"
    assert t.function_call.type == "callList"
    assert json.loads(t.function_call.payload) == {"calls": [{"functionId": "add", "args": [1, 2]},
                                                             {"functionId": "add1", "args": [41]}]}
    assert t.result_handler.type == "test" and json.loads(t.result_handler.config) == {"expectCount": 2}
    assert t.task_timeout_ms == 5000
    assert t.call_failure_policy == pb.CALL_FAILURE_POLICY_CONTINUE
    assert (t.call_retry_policy.max_attempts, t.call_retry_policy.base_backoff_ms,
            t.call_retry_policy.jitter_percent) == (4, 20, 1)
    assert t.instance_id == "tenant-a"


def test_task_defaults_generate_a_task_id_and_leave_optional_parts_unset():
    t = cli.task_from_args(submit_ns("--calls", "add:1,2"))
    assert len(t.task_id) == 36
    assert not t.HasField("result_handler") and not t.HasField("call_retry_policy")
    assert t.call_failure_policy == pb.CALL_FAILURE_POLICY_UNSPECIFIED and t.task_timeout_ms == 0
    assert cli.task_from_args(submit_ns("--calls", "add:1,2")).task_id != t.task_id


def test_task_from_payload_with_another_builder(tmp_path):
    t = cli.task_from_args(submit_ns("--builder", "rangeScan", "--payload",
                                     '{"functionId": "square", "start": 0, "stop": 10}'))
    assert t.function_call.type == "rangeScan"
    assert json.loads(t.function_call.payload)["stop"] == 10
    f = tmp_path / "p.json"
    f.write_text('{"functionId": "echo"}')
    t = cli.task_from_args(submit_ns("--builder", "payload", "--payload", f"@{f}"))
    assert t.function_call.payload == b'{"functionId": "echo"}'


@pytest.mark.parametrize("argv,message", [
    ([], "submit needs --calls, --payload or --task-json"),
    (["--calls", "a", "--payload", "{}"], "either --calls or --payload"),
    (["--calls", "a", "--builder", "static"], "cannot be used with --builder static"),
    (["--payload", "{nope"], "--payload is not valid JSON"),
    (["--payload", "@/nonexistent/x.json"], "cannot read"),
    (["--calls", "a", "--result-config", "{}"], "--result-config needs --result-handler"),
    (["--calls", "a", "--result-handler", "test", "--result-config", "[x"], "--result-config is not valid JSON"),
])
def test_task_flag_errors(argv, message):
    with pytest.raises(cli.UsageError) as ei:
        cli.task_from_args(submit_ns(*argv))
    assert message in str(ei.value)


@pytest.mark.parametrize("attr,flag", [("timeout_ms", "--timeout-ms"), ("max_attempts", "--max-attempts")])
def test_negative_numbers_are_refused(attr, flag, capsys):
    with pytest.raises(SystemExit) as ei:                 # by the parser, before anything runs
        submit_ns("--calls", "a", flag, "-1")
    assert ei.value.code == cli.EXIT_USAGE and f"argument {flag}: -1 must be >= 0" in capsys.readouterr().err
    ns = submit_ns("--calls", "a")
    setattr(ns, attr, -1)                                 # a namespace built by hand
    with pytest.raises(cli.UsageError, match=f"{flag} must be >= 0"):
        cli.task_from_args(ns)


def test_task_json_file_and_stdin(tmp_path):
    doc = {"taskId": "from-json", "functionCall": {"type": "callList", "payload": {"calls": []}},
           "resultHandler": {"type": "log", "config": '{"level": "debug"}'},
           "task_timeout_ms": 9, "callFailurePolicy": "continue", "callRetryPolicy": {"maxAttempts": 2},
           "instanceId": "i"}
    f = tmp_path / "task.json"
    f.write_text(json.dumps(doc))
    t = cli.task_from_args(submit_ns("--task-json", str(f)))
    assert t.task_id == "from-json" and t.function_call.payload == b'{"calls":[]}'
    assert t.result_handler.config == b'{"level": "debug"}'
    assert (t.task_timeout_ms, t.call_failure_policy, t.call_retry_policy.max_attempts, t.instance_id) == \
        (9, pb.CALL_FAILURE_POLICY_CONTINUE, 2, "i")
    # flags override the JSON task
    t = cli.task_from_args(submit_ns("--task-json", "-", "--task-id", "over", "--calls", "add:1,2",
                                     "--policy", "fast-fail"), stdin=io.StringIO(json.dumps(doc)))
    assert t.task_id == "over" and b"add" in t.function_call.payload
    assert t.call_failure_policy == pb.CALL_FAILURE_POLICY_FAST_FAIL


@pytest.mark.parametrize("content,message", [
    ("{x", "--task-json is not valid JSON"),
    ("[1]", "--task-json must hold a JSON object"),
    ('{"taskID": "x", "functionCall": {"type": "callList"}}', "--task-json: "),
    ('{"functionCall": {"type": "callList", "payload": "{bad"}}', "functionCall.payload is not valid JSON"),
    ('{"taskId": "x"}', "the task names no builder"),
])
def test_task_json_errors(content, message):
    with pytest.raises(cli.CLIError) as ei:
        cli.task_from_args(submit_ns("--task-json", "-"), stdin=io.StringIO(content))
    assert message in str(ei.value)


def test_argparse_rejects_conflicting_modes_and_bad_choices(capsys):
    with pytest.raises(SystemExit) as ei:
        cli.build_parser().parse_args(["submit", "--watch", "--no-wait"])
    assert ei.value.code == 2
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["serve", "--profile", "edge"])
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args([])


# --- rendering ----------------------------------------------------------------------------------


def test_result_to_json_decodes_outputs_and_details():
    r = pb.TaskResult(state=pb.TASK_STATE_SUCCEEDED, outputs=[b"3", b'{"a":[1]}', b"\xff"],
                      plugin_results=[pb.PluginResult(plugin="test", ok=True, message="m", details=b'{"count":2}'),
                                      pb.PluginResult(plugin="log", ok=False)],
                      statistic=pb.TaskStatistic(call_count=2, cache_hits=1))
    out = cli.response_to_json(pb.GetTaskResultResponse(task_id="t", state=pb.TASK_STATE_SUCCEEDED, result=r))
    assert out["taskId"] == "t" and out["state"] == "SUCCEEDED"
    assert out["result"]["outputs"] == [3, {"a": [1]}, {"base64": "/w=="}]
    assert out["result"]["pluginResults"] == [{"plugin": "test", "ok": True, "message": "m", "details": {"count": 2}},
                                              {"plugin": "log", "ok": False, "message": "", "details": None}]
    assert out["result"]["statistic"]["callCount"] == 2 and out["result"]["statistic"]["cacheHits"] == 1
    upd = cli.response_to_json(pb.TaskUpdate(task_id="t", state=pb.TASK_STATE_RUNNING))
    assert upd == {"taskId": "t", "state": "RUNNING", "isTerminal": False}


# --- client commands against an in-process fake WorkerService -------------------------------------


class FakeWorker(worker_pb2_grpc.WorkerServiceServicer):
    def __init__(self):
        self.submitted = []

    def RequestTaskSlot(self, request, context):
        if request.task_id == "full":
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "no free slot (50 of 50 in use)")
        return pb.RequestTaskSlotResponse(task_id=request.task_id, slot_id="slot-3", state=pb.TASK_STATE_ALLOCATED)

    def SubmitTask(self, request, context):
        self.submitted.append(request)
        if request.task.task_id == "bad":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "task.function_call is required")
        return pb.SubmitTaskResponse(task_id=request.task.task_id, state=pb.TASK_STATE_RUNNING)

    def GetTaskResult(self, request, context):
        if request.task_id == "gone":
            context.abort(grpc.StatusCode.NOT_FOUND, "task gone is unknown or its result expired")
        return pb.GetTaskResultResponse(task_id=request.task_id, state=pb.TASK_STATE_FAILED,
                                        result=pb.TaskResult(state=pb.TASK_STATE_FAILED, failure_code="CALL_FAILED"))

    def WatchTasks(self, request, context):
        for tid in request.task_ids:
            yield pb.TaskUpdate(task_id=tid, state=pb.TASK_STATE_RUNNING)
        for tid in request.task_ids:
            ok = not tid.startswith("f")
            state = pb.TASK_STATE_SUCCEEDED if ok else pb.TASK_STATE_FAILED
            yield pb.TaskUpdate(task_id=tid, state=state, is_terminal=True,
                                result=pb.TaskResult(state=state, outputs=[b"3"] if ok else []))

    def TaskSession(self, request_iterator, context):
        """The session form of the unary RPCs above, as the client library uses it."""
        for batch in request_iterator:
            events = []
            for r in batch.requests:
                op = r.WhichOneof("op")
                try:
                    if op == "watch":
                        ids = list(r.watch.task_ids)
                        for i, upd in enumerate(self.WatchTasks(r.watch, _AbortingContext())):
                            events.append(pb.SessionEvent(request_id=r.request_id if i < len(ids) else 0,
                                                          update=upd))
                        continue
                    ctx = _AbortingContext()
                    if op == "submit":
                        ev = pb.SessionEvent(request_id=r.request_id, submitted=self.SubmitTask(r.submit, ctx))
                        if r.follow:
                            events.append(ev)
                            ids = [r.submit.task.task_id]
                            for upd in list(self.WatchTasks(pb.WatchTasksRequest(task_ids=ids), ctx))[1:]:
                                events.append(pb.SessionEvent(update=upd))
                            continue
                    elif op == "request_slot":
                        ev = pb.SessionEvent(request_id=r.request_id, slot=self.RequestTaskSlot(r.request_slot, ctx))
                    else:
                        ev = pb.SessionEvent(request_id=r.request_id, result=self.GetTaskResult(r.get_result, ctx))
                    events.append(ev)
                except _Aborted as err:
                    events.append(pb.SessionEvent(request_id=r.request_id, error=pb.SessionError(
                        code=err.code.value[0], message=err.details)))
            yield pb.SessionEventBatch(events=events)


class _Aborted(Exception):
    def __init__(self, code, details):
        self.code, self.details = code, details


class _AbortingContext:
    def abort(self, code, details):
        raise _Aborted(code, details)


@pytest.fixture(scope="module")
def worker():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    fake = FakeWorker()
    worker_pb2_grpc.add_WorkerServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield fake, f"127.0.0.1:{port}"
    server.stop(0)


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_submit_waits_for_the_terminal_result(worker, capsys):
    fake, addr = worker
    code, out, err = run(capsys, "submit", "--addr", addr, "--task-id", "ok-1", "--calls", "add:1,2")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["taskId"] == "ok-1" and doc["state"] == "SUCCEEDED" and doc["result"]["outputs"] == [3]
    sent = fake.submitted[-1]
    assert sent.slot_id == "" and sent.task.function_call.type == "callList"


def test_submit_with_slot_and_no_wait(worker, capsys):
    fake, addr = worker
    code, out, _ = run(capsys, "submit", "--addr", addr, "--task-id", "nw", "--calls", "add:1,2",
                       "--slot", "slot-3", "--no-wait", "--compact")
    assert code == 0 and json.loads(out) == {"taskId": "nw", "state": "RUNNING"}
    assert "\n" not in out.strip()
    assert fake.submitted[-1].slot_id == "slot-3"


def test_submit_watch_streams_json_lines_and_reports_failure(worker, capsys):
    _, addr = worker
    code, out, _ = run(capsys, "submit", "--addr", addr, "--task-id", "f-1", "--calls", "fail", "--watch")
    lines = [json.loads(x) for x in out.splitlines()]
    assert [x["state"] for x in lines] == ["RUNNING", "RUNNING", "FAILED"]
    assert lines[-1]["isTerminal"] is True
    assert code == cli.EXIT_TASK_FAILED


def test_grpc_errors_print_code_and_message(worker, capsys):
    _, addr = worker
    code, out, err = run(capsys, "submit", "--addr", addr, "--task-id", "bad", "--calls", "x")
    assert code == 1 and out == ""
    assert err.strip() == "error: INVALID_ARGUMENT: task.function_call is required"
    code, _, err = run(capsys, "slot", "full", "--addr", addr)
    assert code == 1 and err.strip() == "error: RESOURCE_EXHAUSTED: no free slot (50 of 50 in use)"
    code, _, err = run(capsys, "result", "gone", "--addr", addr)
    assert code == 1 and err.startswith("error: NOT_FOUND: ")


def test_unreachable_worker_is_unavailable(capsys):
    code, _, err = run(capsys, "result", "t", "--addr", "127.0.0.1:1", "--rpc-timeout", "5")
    assert code == 1 and err.startswith("error: UNAVAILABLE: ")


def test_input_errors_exit_2_without_calling_the_worker(worker, capsys):
    fake, addr = worker
    n = len(fake.submitted)
    code, _, err = run(capsys, "submit", "--addr", addr, "--payload", "{x")
    assert code == cli.EXIT_USAGE and "error: --payload is not valid JSON" in err and len(fake.submitted) == n


def test_slot_result_and_watch_commands(worker, capsys):
    _, addr = worker
    code, out, _ = run(capsys, "slot", "t9", "--ttl-ms", "1000", "--addr", addr)
    assert code == 0 and json.loads(out) == {"taskId": "t9", "slotId": "slot-3", "state": "ALLOCATED"}
    code, out, _ = run(capsys, "result", "t9", "--addr", addr)
    assert code == cli.EXIT_TASK_FAILED and json.loads(out)["result"]["failureCode"] == "CALL_FAILED"
    code, out, _ = run(capsys, "watch", "a", "b", "--addr", addr)
    lines = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and len(lines) == 4 and {x["taskId"] for x in lines if x["isTerminal"]} == {"a", "b"}


# --- serve ---------------------------------------------------------------------------------------------


def test_serve_print_config(monkeypatch, capsys):
    monkeypatch.setenv("TASK_SLOTS", "9")
    monkeypatch.delenv("WORKER_CONFIG", raising=False)
    code, out, _ = run(capsys, "serve", "--profile", "bundle", "--print-config")
    doc = json.loads(out)
    assert code == 0 and doc["worker"]["taskSlots"] == 9 and doc["streamBuild"]["enabled"] is True
    assert doc["workerRegistryPrefix"] == "/blockx/bundle-workers/"


def test_serve_reports_bad_configuration(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("TASK_SLOTS", "0")
    code, out, err = run(capsys, "serve", "--print-config")
    assert code == 2 and json.loads(out)["worker"]["taskSlots"] == 0
    assert "worker.taskSlots (TASK_SLOTS) must be > 0" in err
    monkeypatch.setenv("TASK_SLOTS", "many")
    code, _, err = run(capsys, "serve")
    assert code == 2 and "TASK_SLOTS (for worker.taskSlots): 'many' is not an integer" in err
    monkeypatch.delenv("TASK_SLOTS")
    cfg_file = tmp_path / "w.json"
    cfg_file.write_text('{"executorSpawnMode": "sandbox"}')
    monkeypatch.setenv("PATH", str(tmp_path))          # no bwrap: refused at start, never a fallback
    code, _, err = run(capsys, "serve", "--config", str(cfg_file))
    assert code == 2 and '"sandbox" needs bubblewrap, and `bwrap` is not installed' in err


def test_serve_hands_the_loaded_config_to_run_serve(monkeypatch, capsys):
    seen = {}

    def fake_serve(cfg, profile):
        seen["cfg"], seen["profile"] = cfg, profile
        return 0

    monkeypatch.setitem(sys.modules, "blockx.app.run", types.SimpleNamespace(serve=fake_serve))
    monkeypatch.setenv("EXECUTOR_COUNT", "2")
    monkeypatch.delenv("WORKER_CONFIG", raising=False)
    code, _, _ = run(capsys, "serve", "--profile", "block")
    assert code == 0
    assert seen["profile"].deployment == "block" and seen["cfg"].executor_count == 2


def test_serve_accepts_every_profile_by_name(monkeypatch, capsys):
    monkeypatch.delenv("WORKER_CONFIG", raising=False)
    code, out, err = run(capsys, "serve", "--profile", "dev", "--print-config")
    assert code == 0, err
    assert json.loads(out)["streamBuild"]["enabled"] is True


def test_a_streamed_writers_count_of_written_outputs_is_printed_and_kept():
    # A task whose writer consumed its outputs as they settled keeps few or none in
    # its result: outputsWritten is how a user sees what was written.
    from blockx.client.outcome import TaskOutcome

    r = pb.TaskResult(state=pb.TASK_STATE_SUCCEEDED, outputs_total=0, outputs_written=1200)
    out = cli.response_to_json(pb.GetTaskResultResponse(task_id="t", state=pb.TASK_STATE_SUCCEEDED, result=r))
    assert out["result"]["outputsWritten"] == 1200
    assert TaskOutcome.from_pb("t", pb.TASK_STATE_SUCCEEDED, r, "w").outputs_written == 1200
