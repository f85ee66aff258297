"""Run a real Worker process (`python -m blockx serve`) for end-to-end tests.

The worker listens on 127.0.0.1:0; the harness reads the bound gRPC and metrics
ports from its `worker_serving` / `metrics_listening` JSON log lines. Its
stderr is collected by a thread so tests can assert on log events and the pipe
never fills. Every wait is bounded."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc
from tests.support import auth

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "blockx" / "examples" / "functions"


class WorkerProcess:
    # The worker's command line; None: `python -m blockx serve` of this interpreter.
    serve_command: list[str] | None = None

    def __init__(self, env: dict[str, str] | None = None, *, profile: str = "block",
                 executors: int = 2, functions_dir: str | os.PathLike | None = None,
                 tls=None, token: str | None = auth.HARNESS_TOKEN) -> None:
        self.tmp = tempfile.mkdtemp(prefix="blockx-e2e-")
        self.tls = tls      # blockx.client.ClientTLS for the harness's own channel (a TLS port)
        self.token = token  # the bearer token of the harness's own channel (None: no credentials)
        # Without auth settings of its own, the worker accepts the harness's admin token.
        harness_tokens = {} if env and ("WORKER_AUTH_MODE" in env or "WORKER_AUTH_TOKENS_FILE" in env) else {
            "WORKER_AUTH_TOKENS_FILE": auth.write_tokens(self.tmp, {"admin": auth.HARNESS_TOKEN})}
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in ("WORKER_CONFIG",)},
            "WORKER_LISTEN": "127.0.0.1:0",
            "METRICS_LISTEN": "127.0.0.1:0",
            "ETCD_ENDPOINTS": "none",
            "EXECUTOR_COUNT": str(executors),
            "EXECUTOR_SOCKET_PATH": os.path.join(self.tmp, "sock", "worker.sock"),
            "FUNCTIONS_DIR": str(functions_dir or EXAMPLES),
            "LOG_LEVEL": "INFO",
            **harness_tokens,
            **(env or {}),
        }
        self.profile = profile
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self.port = 0
        self.metrics_port = 0
        self.channel: grpc.Channel | None = None
        self.stub: pb_grpc.WorkerServiceStub | None = None

    # ---- lifecycle ------------------------------------------------------------

    def start(self, ready: bool = True, timeout: float = 30.0) -> "WorkerProcess":
        # The profile goes through $BLOCKX_PROFILE: `serve --profile` offers only
        # the production profiles, and the tests also start the dev profile.
        self.proc = subprocess.Popen(
            self.serve_command or [sys.executable, "-m", "blockx", "serve"],
            env={**self.env, "BLOCKX_PROFILE": self.profile}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            cwd=self.tmp)
        threading.Thread(target=self._pump, daemon=True).start()
        ev = self.wait_event("worker_serving", timeout)
        self.port = ev["port"]
        m = self.find_event("metrics_listening")
        self.metrics_port = m["port"] if m else 0
        self.channel = auth.channel(f"127.0.0.1:{self.port}", self.tls, self.token)
        self.stub = pb_grpc.WorkerServiceStub(self.channel)
        if ready:
            self.wait_serving(timeout)
        return self

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._cond:
                self.lines.append(line)
                try:
                    obj = json.loads(line)
                    if isinstance(obj, dict):
                        self.events.append(obj)
                except ValueError:
                    pass
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @staticmethod
    def _event_name(obj: dict) -> str:
        return obj.get("event") or obj.get("msg") or ""

    def find_event(self, name: str, **match: Any) -> dict | None:
        with self._cond:
            for obj in self.events:
                if self._event_name(obj) == name and all(obj.get(k) == v for k, v in match.items()):
                    return obj
        return None

    def events_named(self, name: str) -> list[dict]:
        with self._cond:
            return [o for o in self.events if self._event_name(o) == name]

    def wait_event(self, name: str, timeout: float = 20.0, **match: Any) -> dict:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for obj in self.events:
                    if self._event_name(obj) == name and all(obj.get(k) == v for k, v in match.items()):
                        return obj
                if self.proc is not None and self.proc.poll() is not None:
                    raise AssertionError(f"worker exited ({self.proc.returncode}) before {name!r}:\n"
                                         + "\n".join(self.lines[-40:]))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {name!r} log event within {timeout}s:\n" + "\n".join(self.lines[-40:]))
                self._cond.wait(min(left, 0.2))

    def health(self, service: str = "") -> int:
        stub = health_pb2_grpc.HealthStub(self.channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status

    def wait_serving(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.health() == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.05)
        raise AssertionError("worker never became SERVING:\n" + "\n".join(self.lines[-40:]))

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError("worker did not exit after SIGTERM:\n" + "\n".join(self.lines[-40:]))

    def __enter__(self) -> "WorkerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- client helpers ---------------------------------------------------------

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def submit(self, task_id: str, builder: str = "callList", payload: Any = None, *, slot_id: str = "",
               timeout_ms: int = 0, policy: int = 0, retry: tuple[int, int, int] | None = None,
               result_handler: tuple[str, Any] | None = None, instance_id: str = "",
               rpc_timeout: float = 10) -> pb.SubmitTaskResponse:
        task = pb.Task(task_id=task_id, task_timeout_ms=timeout_ms, call_failure_policy=policy,
                       instance_id=instance_id,
                       function_call=pb.FunctionCallConfig(type=builder, payload=_json(payload)))
        if retry is not None:
            task.call_retry_policy.CopyFrom(pb.CallRetryPolicy(max_attempts=retry[0], base_backoff_ms=retry[1],
                                                               jitter_percent=retry[2]))
        if result_handler is not None:
            task.result_handler.CopyFrom(pb.ResultHandler(type=result_handler[0], config=_json(result_handler[1])))
        return self.stub.SubmitTask(pb.SubmitTaskRequest(task=task, slot_id=slot_id), timeout=rpc_timeout)

    def submit_calls(self, task_id: str, calls: list[tuple[str, list]], **kw) -> pb.SubmitTaskResponse:
        return self.submit(task_id, "callList",
                           {"calls": [{"functionId": f, "args": a} for f, a in calls]}, **kw)

    def result(self, task_id: str) -> pb.GetTaskResultResponse:
        return self.stub.GetTaskResult(pb.GetTaskResultRequest(task_id=task_id), timeout=10)

    def wait_terminal(self, task_id: str, timeout: float = 30.0) -> pb.TaskResult:
        """Watch the task until its terminal update; returns its TaskResult."""
        for upd in self.stub.WatchTasks(pb.WatchTasksRequest(task_ids=[task_id]), timeout=timeout):
            if upd.is_terminal:
                return upd.result
        raise AssertionError(f"watch of {task_id} ended without a terminal update")


def _json(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return json.dumps(value).encode()


def outputs(result: pb.TaskResult) -> list[Any]:
    return [json.loads(o) for o in result.outputs]
