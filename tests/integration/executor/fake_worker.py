"""A small fake Worker for executor tests: a real Unix socket server speaking the
UDS frame codec, which spawns the real executor process and talks to it.

A reader thread decodes every frame the executor sends: Heartbeats go to
`heartbeats` (with the local receive time), everything else to a queue that
`next()` pops. With `auto_code=True` function_code waits are answered from
`functions` (function id -> source) before `next()` sees them; `code_requests`
records each one. Every wait is bounded by a timeout."""

from __future__ import annotations

import hashlib
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from blockx._fast import load
from blockx.protocol import messages as m

codec = load("codec")

EXECUTOR_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                            "executor"))
TIMEOUT = 10.0


def digest_of(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def executor_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [EXECUTOR_DIR, env.get("PYTHONPATH")]))
    return env


class FakeWorker:
    def __init__(self, functions: dict[str, str] | None = None, *, max_inflight: int = 8,
                 max_runnable: int = 8, heartbeat_ms: int = 50, auto_code: bool = True,
                 extra_args: tuple = ()):
        self.functions = dict(functions or {})
        self.auto_code = auto_code
        self.dir = tempfile.mkdtemp(prefix="bx-exec-", dir="/tmp")
        self.path = os.path.join(self.dir, "w.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.listener.settimeout(TIMEOUT)
        self.stderr_path = os.path.join(self.dir, "stderr.log")
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "blockx_executor", "--executor-id", "exec-1",
             "--socket-path", self.path, "--executor-max-inflight", str(max_inflight),
             "--executor-max-runnable", str(max_runnable),
             "--heartbeat-interval-ms", str(heartbeat_ms), *extra_args],
            stdin=subprocess.DEVNULL, stdout=self._stderr, stderr=self._stderr,
            env=executor_env())
        try:
            self.conn, _ = self.listener.accept()
        except socket.timeout:
            self.proc.kill()
            raise AssertionError(f"executor did not connect; stderr:\n{self.stderr()}")
        self.conn.settimeout(TIMEOUT)
        self.frames: queue.Queue = queue.Queue()
        self.heartbeats: list[tuple[float, dict]] = []
        self.hb_cond = threading.Condition()
        self.code_requests: list[dict] = []
        self.eof = threading.Event()
        self._send_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    # ---- plumbing -------------------------------------------------------------------
    def _read(self) -> None:
        decoder = codec.FrameDecoder()
        try:
            while True:
                data = self.conn.recv(1 << 16)
                if not data:
                    break
                for env, sidecar in decoder.feed(data):
                    m.validate(env, m.EXECUTOR_TO_WORKER)
                    if env["messageType"] == m.HEARTBEAT:
                        with self.hb_cond:
                            self.heartbeats.append((time.monotonic(), env["payload"]))
                            self.hb_cond.notify_all()
                    elif (self.auto_code and env["messageType"] == m.CALL_WAITING
                          and env["payload"]["waitKind"] == m.WAIT_FUNCTION_CODE):
                        self.code_requests.append(env)
                        self._answer_code(env)
                    else:
                        self.frames.put((env, sidecar))
        except OSError:
            pass
        except Exception as exc:  # surface decode / contract errors to the test
            self.frames.put(({"messageType": "ReaderError", "error": repr(exc)}, None))
        finally:
            self.eof.set()
            with self.hb_cond:
                self.hb_cond.notify_all()

    def _answer_code(self, env: dict) -> None:
        p = env["payload"]
        source = self.functions.get(p["functionId"])
        if source is None:
            self.send(m.resume_call_error(env["callId"], env["requestId"], m.WAIT_FUNCTION_CODE,
                                          m.FUNCTION_NOT_FOUND, f"no function {p['functionId']}",
                                          False))
        else:
            self.send(m.resume_function_code(env["callId"], env["requestId"], source,
                                             digest_of(source)))

    def send(self, env: dict, sidecar: bytes | None = None) -> None:
        with self._send_lock:
            self.conn.sendall(codec.encode_frame(env, sidecar))

    def send_raw(self, data: bytes) -> None:
        with self._send_lock:
            self.conn.sendall(data)

    def stderr(self) -> str:
        self._stderr.flush()
        with open(self.stderr_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    # ---- test API ---------------------------------------------------------------------
    def execute(self, call_id: str, function_id: str, args: list, *, budget_ms: int = 0,
                attempt: int = 1, entry: str = "main", parent: str = "", task: str = "task-1",
                digest: str | None = None) -> None:
        if digest is None:
            digest = digest_of(self.functions[function_id])
        self.send(m.execute_call(call_id, task, function_id, digest, args, attempt, entry,
                                 parent, budget_ms))

    def next(self, timeout: float = TIMEOUT) -> tuple[dict, bytes | None]:
        try:
            env, sidecar = self.frames.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"no frame from the executor within {timeout} s; stderr:\n{self.stderr()}"
            ) from None
        assert env["messageType"] != "ReaderError", env
        return env, sidecar

    def expect(self, message_type: str, call_id: str | None = None,
               timeout: float = TIMEOUT) -> tuple[dict, bytes | None]:
        env, sidecar = self.next(timeout)
        assert env["messageType"] == message_type, (message_type, env)
        if call_id is not None:
            assert env["callId"] == call_id, (call_id, env)
        return env, sidecar

    def no_frame(self, within: float) -> None:
        try:
            env, _ = self.frames.get(timeout=within)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected frame {env}")

    def wait_heartbeat(self, predicate, timeout: float = TIMEOUT) -> dict:
        deadline = time.monotonic() + timeout
        seen = 0
        with self.hb_cond:
            while True:
                for _, hb in self.heartbeats[seen:]:
                    if predicate(hb):
                        return hb
                seen = len(self.heartbeats)
                left = deadline - time.monotonic()
                if left <= 0 or self.eof.is_set():
                    last = self.heartbeats[-1][1] if self.heartbeats else None
                    raise AssertionError(f"no matching heartbeat; last: {last}")
                self.hb_cond.wait(left)

    def close_socket(self) -> None:
        try:
            self.conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()

    def wait_exit(self, timeout: float = TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"executor did not exit; stderr:\n{self.stderr()}") from None

    def shutdown(self) -> None:
        if self.proc.poll() is None:
            self.close_socket()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.listener.close()
        self._stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)
