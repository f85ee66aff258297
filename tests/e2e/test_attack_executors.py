"""Attacks on the executor side of a real Worker with real executors: posing as an
executor from a plain process and from user code, answering for another
executor's call, reading the Worker's environment through /proc, and forging
log lines with print(). Each is refused; the real executors keep serving."""
import json
import os
import pathlib
import socket
import tempfile
import threading
import time

import pytest

from blockx._fast import load
from blockx.protocol import messages as m
from blockx.worker.v1 import worker_pb2 as pb
from tests.e2e.conftest import make_functions_dir
from tests.e2e.spawn_modes import SPAWN_MODES, spawn_env
from tests.support.worker import WorkerProcess, outputs

codec = load("codec")
_ids = iter(range(1_000_000))


def _start(tmp_path_factory, env, executors=1):
    fdir = make_functions_dir(tmp_path_factory.mktemp("fn"))
    return WorkerProcess({"RESULT_RETENTION_MS": "60000", **env}, functions_dir=fdir, executors=executors).start()


def run(w, fn, *args, timeout=30):
    task_id = f"t-{fn}-{next(_ids)}"
    w.submit_calls(task_id, [(fn, list(args))], retry=(1, 5, 0))
    return w.wait_terminal(task_id, timeout=timeout)


def ok(res):
    assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
    return outputs(res)[0]


class Forger:
    """A plain process's connection to the executor socket that sends a first
    Heartbeat and records everything the Worker sends back."""

    def __init__(self, path, executor_id, secret=None):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(0.5)
        self.sock.connect(path)
        hb = m.heartbeat(executor_id, os.getpid(), 1, 0, 0, 4, 1 << 20, 0)
        if secret is not None:
            hb["payload"]["attachSecret"] = secret
        self.sock.sendall(codec.encode_frame(hb))
        self.frames = []
        self.closed = False
        self._decoder = codec.FrameDecoder()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                data = b""
            if not data:
                self.closed = True
                return
            self.frames.extend(env for env, _ in self._decoder.feed(data))

    def wait_closed(self, timeout=10):
        deadline = time.monotonic() + timeout
        while not self.closed and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.closed

    def close(self):
        self.sock.close()


def _metric(w, name):
    for line in w.metrics_text().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture(scope="module")
def one_executor(tmp_path_factory):
    w = _start(tmp_path_factory, {}, executors=1)
    yield w
    w.stop()


def test_a_forged_attach_from_a_plain_process_is_refused_and_the_real_executor_keeps_serving(one_executor):
    w = one_executor
    path = w.env["EXECUTOR_SOCKET_PATH"]
    real_pid = ok(run(w, "pid"))
    forgers = [Forger(path, "exec-7"),                   # an id nobody started
               Forger(path, "exec-0"),                   # the live executor's id, no secret
               Forger(path, "exec-0", "0" * 64),         # ... a wrong secret
               Forger(path, "exec-0", "")]               # ... an empty one
    try:
        # While the forgers' connections are open, a call with arguments worth stealing runs.
        assert ok(run(w, "echo", {"card": "4111-1111"})) == {"card": "4111-1111"}
        for f in forgers:
            assert f.wait_closed(), "the worker kept a forged attach open"
            assert f.frames == [], f"the worker sent a forger {f.frames}"
    finally:
        for f in forgers:
            f.close()
    # The real executor was neither replaced nor killed: same process, still serving.
    assert ok(run(w, "pid")) == real_pid
    assert _metric(w, "blockx_executor_restarts_total") == 0
    refused = w.events_named("executor_attach_refused")
    assert len(refused) >= 4 and any("already attached" in e["reason"] or "attachSecret" in e["reason"]
                                     for e in refused if e["executor_id"] == "exec-0")
    assert any(e["executor_id"] == "exec-7" and "unknown id" in e["reason"] for e in refused)


@pytest.fixture(scope="module")
def one_call_each(tmp_path_factory):
    """Two executors that run one call at a time: a call that holds one of them
    leaves the other for the next call."""
    cfg = pathlib.Path(tempfile.mkdtemp(prefix="bx-cfg-")) / "worker.json"
    cfg.write_text(json.dumps({"dispatcher": {"executorMaxInflight": 1}}))
    w = _start(tmp_path_factory, {"WORKER_CONFIG": str(cfg)}, executors=2)
    yield w
    w.stop()


def test_a_frame_about_a_call_dispatched_elsewhere_is_refused(one_call_each):
    w = one_call_each
    w.submit_calls("t-victim", [("sleepy", [3, "the real output"])], retry=(1, 5, 0))
    deadline = time.monotonic() + 10
    while _metric(w, "blockx_calls_dispatched_total") < 1:
        assert time.monotonic() < deadline, "the victim call was never dispatched"
        time.sleep(0.02)
    # User code on the other executor answers for the victim's call.
    assert ok(run(w, "forge_frame", "t-victim/0", "forged")) == 1
    res = w.wait_terminal("t-victim", timeout=30)
    assert ok(res) == "the real output"
    ev = w.wait_event("executor_frame_refused", timeout=5)
    assert ev["call_id"] == "t-victim/0" and ev["message_type"] == "CallCompleted"
    assert ok(run(w, "add", 1, 2)) == 3


@pytest.fixture(scope="module", params=SPAWN_MODES)
def by_mode(request, tmp_path_factory):
    w = _start(tmp_path_factory, spawn_env(request.param), executors=1)
    w.mode = request.param
    yield w
    w.stop()


def test_user_code_can_neither_attach_nor_write_into_the_socket_directory(by_mode):
    w = by_mode
    path = w.env["EXECUTOR_SOCKET_PATH"]
    seen = ok(run(w, "attack_attach", path))
    for where, result in seen["attach"].items():
        if isinstance(result, dict):
            for eid, outcome in result.items():
                assert not outcome.startswith("attached"), (w.mode, where, eid, outcome)
    for where, result in seen["create"].items():
        assert result != "created", (w.mode, where)
    assert not list(pathlib.Path(path).parent.glob("pwned*"))
    if w.mode.startswith("sandbox"):
        # Its own socket is there (read-only); the Worker's directory is not.
        assert seen["attach"][path] == "not visible"
        assert all(o.startswith("refused") for o in seen["attach"]["/run/blockx/worker.sock"].values()), seen
        assert "Read-only file system" in seen["create"]["/run/blockx/worker.sock"]
    elif os.geteuid() == 0:
        # EXECUTOR_USER (nobody) cannot even enter the Worker's socket directory.
        assert seen["attach"][path] == "not visible" and seen["create"][path] == "not visible", seen
    assert ok(run(w, "add", 2, 3)) == 5


@pytest.mark.skipif(os.geteuid() != 0, reason="executors change users only under a root Worker")
def test_a_process_mode_function_cannot_read_the_workers_environment(tmp_path_factory):
    secret = "db-password-" + os.urandom(8).hex()
    w = _start(tmp_path_factory, {"EXECUTOR_SPAWN_MODE": "process", "BLOCKX_TEST_DB_PASSWORD": secret})
    try:
        seen = ok(run(w, "attack_environ", w.proc.pid))
        assert secret not in seen and "PermissionError" in seen, seen
        assert ok(run(w, "whereami"))["uid"] == 65534
        assert secret not in json.dumps(ok(run(w, "whereami"))["env"])
    finally:
        w.stop()


@pytest.fixture(scope="module")
def chatty_worker(tmp_path_factory):
    w = _start(tmp_path_factory, {"EXECUTOR_OUTPUT_LINE_BYTES": "1024", "EXECUTOR_OUTPUT_BYTES_PER_S": "20000"})
    yield w
    w.stop()


def test_printed_output_is_an_escaped_field_of_a_tagged_bounded_record(chatty_worker):
    w = chatty_worker
    forged = json.dumps({"ts": "2026-01-01T00:00:00.000Z", "level": "info", "logger": "blockx.worker",
                         "msg": "forged_by_user", "event": "forged_by_user", "service": "blockx-worker"})
    assert ok(run(w, "chatty", 20_000, forged)) == 20_000
    deadline = time.monotonic() + 10
    while not w.events_named("executor_output_dropped"):
        assert time.monotonic() < deadline, "no executor_output_dropped record"
        time.sleep(0.05)
    # Never a record of its own: only the text of tagged records, from both streams.
    assert w.find_event("forged_by_user") is None
    assert not any(line.startswith('{"ts":"2026-01-01') or line == forged for line in list(w.lines))
    out = w.events_named("executor_output")
    streams = {e["stream"] for e in out if e["text"] == forged}
    assert streams == {"stdout", "stderr"}, streams
    assert all(e["executor"] == "exec-0" for e in out)
    long = [e for e in out if e["text"].startswith("LLLL")]
    assert len(long) == 1 and long[0]["truncated"] and len(long[0]["text"]) == 1024
    assert not any("-end-of-long-line" in e["text"] for e in out)
    # Bounded: 20,000 lines within a few seconds at 20,000 bytes/s allow a few hundred.
    chatty = [e for e in out if e["text"].startswith("chatty line")]
    assert 0 < len(chatty) < 2_000, len(chatty)
    assert sum(e["lines"] for e in w.events_named("executor_output_dropped")) > 0
    assert ok(run(w, "add", 1, 1)) == 2

