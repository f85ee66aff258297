"""A real Worker process for the load benchmark (`python -m blockx serve`).

Same approach as tests/support/worker.py: listen on 127.0.0.1:0 and read the
bound gRPC / metrics ports from the `worker_serving` / `metrics_listening` JSON
log lines. The log goes to a file, not a pipe: a reader thread parsing one
`task_finished` line per task would compete with the worker for the two cores.
Optionally the worker runs under cProfile (`-m cProfile -o FILE`); SIGTERM makes
`serve` return, so cProfile writes FILE on the way out. Every wait is bounded."""
from __future__ import annotations

import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "blockx" / "examples" / "functions"
BENCH_FUNCTIONS = pathlib.Path(__file__).resolve().parent / "functions"


class WorkerError(RuntimeError):
    pass


# The admin token every bench worker accepts in token mode; the bench's clients send it
# (blockx.client finds it in BLOCKX_TOKEN, set for this process by bench/e2e/main.py).
BENCH_TOKEN = secrets.token_urlsafe(32)


class BenchWorker:
    """``auth``: "token" (the Worker's default; it accepts BENCH_TOKEN, ``token``) or
    "none" (WORKER_AUTH_MODE=none, ``token`` None)."""

    def __init__(self, *, executors: int, env: dict[str, str] | None = None,
                 cprofile_out: str | None = None, profile: str = "block", auth: str = "token",
                 root: str | os.PathLike | None = None) -> None:
        # ``root``: the checkout whose blockx the worker runs (default this one; another
        # checkout with its extensions built measures a baseline build side by side)
        self.root = str(root or ROOT)
        self.tmp = tempfile.mkdtemp(prefix="blockx-bench-")
        if auth == "token":
            tokens = os.path.join(self.tmp, "tokens")
            with open(tokens, "w") as f:
                f.write(f"admin {BENCH_TOKEN}\n")
            auth_env = {"WORKER_AUTH_MODE": "token", "WORKER_AUTH_TOKENS_FILE": tokens}
            self.token: str | None = BENCH_TOKEN
        elif auth == "none":
            auth_env, self.token = {"WORKER_AUTH_MODE": "none"}, None
        else:
            raise ValueError(f"auth must be token or none, got {auth!r}")
        self.auth = auth
        fdir = os.path.join(self.tmp, "functions")
        os.makedirs(fdir)
        for src in list(EXAMPLES.glob("*.py")) + list(BENCH_FUNCTIONS.glob("*.py")):
            shutil.copy(src, os.path.join(fdir, src.name))
        self.executors = executors
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "WORKER_CONFIG"},
            "WORKER_LISTEN": "127.0.0.1:0",
            "METRICS_LISTEN": "127.0.0.1:0",
            "ETCD_ENDPOINTS": "none",
            "EXECUTOR_COUNT": str(executors),
            "EXECUTOR_SOCKET_PATH": os.path.join(self.tmp, "sock", "worker.sock"),
            "FUNCTIONS_DIR": fdir,
            "IO_DEVSTUB_ENABLED": "true",          # io_loop does IO through the devstub backend
            "TASK_SLOTS": "256",
            "EXECUTOR_TASK_SLOTS": "256",
            "CALL_DEADLINE_MS": "120000",
            "LOG_LEVEL": "INFO",
            **auth_env,
            **(env or {}),
        }
        self.cprofile_out = cprofile_out
        self.profile = profile
        self.log_path = os.path.join(self.tmp, "worker.log")
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.metrics_port = 0

    def start(self, timeout: float = 60.0) -> "BenchWorker":
        cmd = [sys.executable]
        if self.cprofile_out:
            cmd += ["-m", "cProfile", "-o", self.cprofile_out]
        cmd += ["-m", "blockx", "serve", "--profile", self.profile]
        env = dict(self.env)
        # `python -m cProfile -m blockx` does not put the cwd on sys.path the way
        # `python -m blockx` does: make the checkout importable either way. Its
        # executor package too (the executors inherit the path): blockx_executor is
        # installed from this checkout, so another root's Worker ran this one's executors.
        env["PYTHONPATH"] = self.pythonpath(env.get("PYTHONPATH", ""))
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         cwd=self.tmp)
        ev = self.wait_event("worker_serving", timeout)
        self.port = int(ev["port"])
        m = self.wait_event("metrics_listening", 5)
        self.metrics_port = int(m["port"])
        self.wait_executors(timeout)
        return self

    def pythonpath(self, inherited: str = "") -> str:
        """The worker's PYTHONPATH: its checkout's blockx and blockx_executor first."""
        return os.pathsep.join(filter(None, [self.root, os.path.join(self.root, "executor"), inherited]))

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    # ---- log ------------------------------------------------------------------------

    def events(self) -> list[dict]:
        out = []
        try:
            with open(self.log_path, "rb") as f:
                for line in f:
                    if line.startswith(b"{"):
                        try:
                            out.append(json.loads(line))
                        except ValueError:
                            pass
        except FileNotFoundError:
            pass
        return out

    def tail(self, n: int = 40) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 16384))
                return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-n:])
        except FileNotFoundError:
            return ""

    def wait_event(self, name: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for ev in self.events():
                if (ev.get("event") or ev.get("msg")) == name:
                    return ev
            if self.proc is not None and self.proc.poll() is not None:
                raise WorkerError(f"worker exited ({self.proc.returncode}) before {name!r}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise WorkerError(f"no {name!r} log event within {timeout}s:\n{self.tail()}")
            time.sleep(0.05)

    # ---- metrics, memory --------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        """Prometheus text as {name{labels}: value}."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                try:
                    out[key] = float(value)
                except ValueError:
                    pass
        return out

    def metric(self, name: str) -> float:
        return self.metrics().get(name, 0.0)

    def wait_executors(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.metric("blockx_executors_healthy") < self.executors:
            if self.proc is not None and self.proc.poll() is not None:
                raise WorkerError(f"worker exited ({self.proc.returncode}) during start:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise WorkerError(f"only {self.metric('blockx_executors_healthy'):.0f} of {self.executors} "
                                  f"executors healthy after {timeout}s:\n{self.tail()}")
            time.sleep(0.05)

    def rss_bytes(self) -> int:
        return proc_rss_bytes(self.pid)

    def executor_pids(self) -> list[int]:
        pids = []
        try:
            with open(f"/proc/{self.pid}/task/{self.pid}/children") as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            pass
        return pids

    def exporter_pid(self) -> int:
        """The pid of the worker's OpenTelemetry exporter process (0: export is off)."""
        ev = next((e for e in self.events() if e.get("event") == "otel_export"), None)
        return int(ev.get("exporter_pid", 0)) if ev else 0

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time so far of the worker, (summed) of its executors and of its
        OpenTelemetry exporter process (a child too, counted apart)."""
        exporter = self._exporter_pid = getattr(self, "_exporter_pid", None) or self.exporter_pid()
        return {"worker": proc_cpu_seconds(self.pid),
                "executors": sum(proc_cpu_seconds(p) for p in descendants(self.executor_pids()) if p != exporter),
                "exporter": proc_cpu_seconds(exporter) if exporter else 0.0}

    # ---- stop -------------------------------------------------------------------------

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM and wait (a profiled worker needs time to write its profile)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise WorkerError(f"worker did not exit within {timeout}s of SIGTERM:\n{self.tail()}")
        return self.proc.returncode

    def cleanup(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


_TICK = os.sysconf("SC_CLK_TCK")


def descendants(pids: list[int]) -> list[int]:
    """`pids` and every process below them: a sandboxed executor runs under bwrap
    or runc, whose own CPU time is not the executor's."""
    out, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        out.append(pid)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")       # runc (Go) forks from any of its threads
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo += [int(p) for p in f.read().split()]
            except OSError:
                pass
    return out


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


_RSS = re.compile(rb"^VmRSS:\s+(\d+)\s+kB", re.M)


def proc_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status", "rb") as f:
        m = _RSS.search(f.read())
    if m is None:
        raise WorkerError(f"no VmRSS for pid {pid}")
    return int(m.group(1)) * 1024
