"""PoolManager: keeps N executor processes running, restarting each that exits.

Slot state machine, one slot per executor id exec-0 .. exec-(N-1):

    RUNNING --process exits--> WAITING --restart_delay_ms--> RUNNING
    RUNNING --process exits, max_restarts restarts already
              within restart_window_ms--> BACKOFF --backoff_ms--> RUNNING
    any --stop()--> STOPPED;  RUNNING --exits, restart disabled--> STOPPED

- A restart is a respawn after an exit; the window counts restart start times.
  After a BACKOFF the slot starts with a fresh window (max_restarts again).
- A spawn that fails (the interpreter cannot be executed) counts as an exit, so
  a broken setup ends in BACKOFF instead of a hot loop.
- kill_executor() SIGKILLs the slot's process (the wedge backstop); the exit
  then restarts it like any other.
- Children get only the allowlisted environment (see DEFAULT_ENV_ALLOWLIST) plus
  BLOCKX_EXECUTOR_* variables and `extra_env`: the Worker's configuration and
  credentials (WORKER_CONFIG, etcd endpoints, tokens, proxies) never reach
  user code.
- Every spawn issues the slot a fresh attach secret (credentials.py) and hands
  it over through a pipe the child inherits (`--attach-secret-fd`), never its
  environment or command line.
- `run_as_user` (process mode, Worker running as root): the executor starts as
  root and leaves root for that user before it attaches (its --run-as-user,
  blockx_executor.privileges); HOME, USER and LOGNAME are that user's.
- `output` (output.py): the children's stdout and stderr are pipes whose lines
  reach the Worker's log as escaped fields of `executor_output` records.
- With a sandbox, each executor is given its private socket
  (listener.private_socket_path), which the adapter listens on.
- Timers are loop.call_later handles; exits arrive through spawn.ChildProcess.
  Nothing blocks the loop except Popen itself (vfork+exec, well under 10 ms)."""

from __future__ import annotations

import asyncio
import enum
import importlib.util
import logging
import os
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .adapter import monotonic_ms
from .counters import counters_for
from .credentials import ExecutorCredentials
from .listener import private_socket_path
from .spawn import ChildProcess

__all__ = ["DEFAULT_ENV_ALLOWLIST", "ENV_PREFIX", "PoolManager", "SlotInfo", "ExecutorSlotState",
           "build_child_env", "executor_ids"]

# What an executor may see of the Worker's environment: locale, time zone,
# interpreter/venv plumbing, the temp dir, and the switch for the pure-Python
# hot paths. LD_LIBRARY_PATH/PYTHONHOME are needed where the interpreter itself
# lives in a non-standard prefix.
DEFAULT_ENV_ALLOWLIST: tuple[str, ...] = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE",
    "LC_MESSAGES", "LC_NUMERIC", "LC_TIME", "TZ", "TMPDIR",
    "PYTHONPATH", "PYTHONHOME", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
    "PYTHONFAULTHANDLER", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONHASHSEED",
    "PYTHONMALLOC", "PYTHONWARNINGS", "VIRTUAL_ENV", "LD_LIBRARY_PATH",
    "BLOCKX_NO_EXTENSIONS",
)
# Variables meant for the executor itself pass through by prefix.
ENV_PREFIX = "BLOCKX_EXECUTOR_"


def executor_ids(count: int) -> list[str]:
    """The executor ids of a pool of `count` slots."""
    return [f"exec-{i}" for i in range(count)]


class ExecutorSlotState(str, enum.Enum):
    RUNNING = "RUNNING"
    WAITING = "WAITING"
    BACKOFF = "BACKOFF"
    STOPPED = "STOPPED"


@dataclass(slots=True)
class SlotInfo:
    executor_id: str
    state: ExecutorSlotState
    pid: int | None
    starts: int
    restarts: int
    kills: int
    backoffs: int
    spawn_failures: int
    last_exit_code: int | None


class _Slot:
    __slots__ = ("executor_id", "state", "child", "timer", "restart_times", "starts",
                 "restarts", "kills", "backoffs", "spawn_failures", "last_exit_code")

    def __init__(self, executor_id: str) -> None:
        self.executor_id = executor_id
        self.state = ExecutorSlotState.STOPPED
        self.child: ChildProcess | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.restart_times: deque[int] = deque()
        self.starts = self.restarts = self.kills = self.backoffs = self.spawn_failures = 0
        self.last_exit_code: int | None = None


def _executor_source_dir() -> str | None:
    """executor/ of a source checkout when blockx_executor is not importable as
    installed (it is, via the editable install, in the project venv)."""
    if importlib.util.find_spec("blockx_executor") is not None:
        return None
    candidate = Path(__file__).resolve().parents[3] / "executor"
    return str(candidate) if (candidate / "blockx_executor").is_dir() else None


def build_child_env(allowlist: Iterable[str] = DEFAULT_ENV_ALLOWLIST,
                    extra_env: Mapping[str, str] | None = None,
                    environ: Mapping[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    keep = set(allowlist)
    env = {k: v for k, v in environ.items() if k in keep or k.startswith(ENV_PREFIX)}
    source = _executor_source_dir()
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (source, env.get("PYTHONPATH", "")) if p)
    if extra_env:
        env.update(extra_env)
    return env


class PoolManager:
    def __init__(
        self,
        executor_count: int,
        socket_path: str,
        *,
        max_inflight: int,
        max_runnable: int,
        restart_enabled: bool = True,
        restart_delay_ms: int = 1000,
        max_restarts: int = 10,
        restart_window_ms: int = 60000,
        backoff_ms: int = 30000,
        env_allowlist: Iterable[str] = DEFAULT_ENV_ALLOWLIST,
        extra_env: Mapping[str, str] | None = None,
        python: str = sys.executable,
        extra_args: Sequence[str] = (),
        command: Sequence[str] | None = None,
        stop_grace_ms: int = 5000,
        stdout=None,
        stderr=None,
        clock_ms: Callable[[], int] = monotonic_ms,
        logger: logging.Logger | None = None,
        metrics=None,
        sandbox=None,
        credentials: ExecutorCredentials | None = None,
        run_as_user: str = "",
        output=None,
    ) -> None:
        for name, value in (("executor_count", executor_count), ("max_inflight", max_inflight),
                            ("max_runnable", max_runnable), ("restart_delay_ms", restart_delay_ms),
                            ("max_restarts", max_restarts), ("restart_window_ms", restart_window_ms),
                            ("backoff_ms", backoff_ms), ("stop_grace_ms", stop_grace_ms)):
            if type(value) is not int or value < 0:
                raise ValueError(f"PoolManager {name} must be a non-negative integer, got {value!r}")
        self.socket_path = os.path.abspath(socket_path)
        self.max_inflight = max_inflight
        self.max_runnable = max_runnable
        self.restart_enabled = restart_enabled
        self.restart_delay_ms = restart_delay_ms
        self.max_restarts = max_restarts
        self.restart_window_ms = restart_window_ms
        self.backoff_ms = backoff_ms
        self.stop_grace_ms = stop_grace_ms
        # `command` replaces `python -m blockx_executor` (a wrapper, a sandbox
        # launcher, a test stand-in); the executor flags always follow it.
        self.command = list(command) if command else [python, "-m", "blockx_executor"]
        self.extra_args = list(extra_args)
        self.env = build_child_env(env_allowlist, extra_env)
        self.run_as_user = run_as_user
        if run_as_user:
            import pwd
            pw = pwd.getpwnam(run_as_user)      # config validation named a user that exists
            self.env.update({"HOME": pw.pw_dir, "USER": pw.pw_name, "LOGNAME": pw.pw_name})
        # The attach secrets; share it with the ExecutorAdapter (its `credentials`).
        self.credentials = credentials if credentials is not None else ExecutorCredentials()
        self.output = output
        self._stdout = stdout
        self._stderr = stderr
        self.clock_ms = clock_ms
        self.log = logger or logging.getLogger("blockx.executor.pool")
        self.counters = counters_for(metrics)
        # sandbox.Sandbox or oci.OciSandbox (EXECUTOR_SPAWN_MODE=sandbox): wraps each
        # executor's argv in bwrap or runc, and names the limit that killed one.
        self.sandbox = sandbox
        self.limit_kills: dict[str, int] = {}
        self._slots = {eid: _Slot(eid) for eid in executor_ids(executor_count)}
        self._loop: asyncio.AbstractEventLoop | None = None    # set by start()
        self._started = False
        self._stopping = False

    def argv_for(self, executor_id: str, *, socket_path: str = "", secret_fd: int = 0) -> list[str]:
        argv = [*self.command, "--executor-id", executor_id, "--socket-path", socket_path or self.socket_path,
                "--executor-max-inflight", str(self.max_inflight),
                "--executor-max-runnable", str(self.max_runnable)]
        if secret_fd:
            argv += ["--attach-secret-fd", str(secret_fd)]
        if self.run_as_user and self.sandbox is None:
            argv += ["--run-as-user", self.run_as_user]
        return [*argv, *self.extra_args]

    # ---- lifecycle ----
    async def start(self) -> None:
        if self._started:
            raise RuntimeError("PoolManager already started")
        self._started = True
        self._loop = asyncio.get_running_loop()
        if self.sandbox is None and not self.run_as_user and os.geteuid() == 0:
            self.log.warning("process-mode executors run as root: user code can read this Worker's "
                             "environment, memory and files (EXECUTOR_USER=root)",
                             extra={"event": "executors_run_as_root", "fields": {}})
        for slot in self._slots.values():
            self._spawn(slot)

    async def stop(self, grace_ms: int | None = None) -> None:
        """SIGTERM every executor, SIGKILL those still running after the grace
        period, and wait (bounded) for them to exit. Idempotent."""
        grace_s = (self.stop_grace_ms if grace_ms is None else grace_ms) / 1000
        self._stopping = True
        children = []
        for slot in self._slots.values():
            if slot.timer is not None:
                slot.timer.cancel()
                slot.timer = None
            if slot.child is not None:
                children.append(slot.child)
                slot.child.terminate()
            slot.state = ExecutorSlotState.STOPPED
        if not children:
            self._close_sandbox()
            return
        await asyncio.gather(*(c.wait(grace_s) for c in children))
        stubborn = [c for c in children if c.alive]
        for child in stubborn:
            self.log.warning("executor pid %d ignored SIGTERM for %.1f s; killing it", child.pid, grace_s)
            child.kill()
        if stubborn:
            await asyncio.gather(*(c.wait(5.0) for c in stubborn))
        for child in children:
            if child.alive:
                self.log.error("executor pid %d did not exit after SIGKILL", child.pid)
                child.detach()
        self._close_sandbox()

    def _close_sandbox(self) -> None:
        if self.output is not None:
            self.output.close()
        if self.sandbox is not None:
            self.sandbox.close()

    # ---- slot machinery ----
    def _spawn(self, slot: _Slot) -> None:
        eid = slot.executor_id
        secret = self.credentials.issue(eid)
        read_fd, write_fd = os.pipe()
        try:
            os.write(write_fd, secret.encode())      # 64 bytes: fits the pipe, never blocks
        finally:
            os.close(write_fd)
        if self.sandbox is not None:
            argv = self.argv_for(eid, socket_path=self.sandbox.executor_socket_path,
                                 secret_fd=self.sandbox.secret_fd(read_fd))
            argv = self.sandbox.argv(eid, argv, socket_path=private_socket_path(self.socket_path, eid),
                                     env=self.env, secret_fd=read_fd)
        else:
            argv = self.argv_for(eid, secret_fd=read_fd)
        piped = self.output is not None
        try:
            assert self._loop is not None
            child = ChildProcess(argv, self.env, loop=self._loop, on_exit=self._on_exit,
                                 stdout=subprocess.PIPE if piped else self._stdout,
                                 stderr=subprocess.PIPE if piped else self._stderr, pass_fds=(read_fd,))
        except OSError as exc:
            os.close(read_fd)
            self.credentials.revoke(eid)
            slot.spawn_failures += 1
            slot.child = None
            self.log.error("cannot start executor %s (%s): %s", slot.executor_id, argv[0], exc,
                           extra={"fields": {"executor_id": slot.executor_id, "error": str(exc)}})
            self._after_exit(slot)
            return
        os.close(read_fd)
        if piped:
            self.output.watch(self._loop, eid, "stdout", child.popen.stdout)
            self.output.watch(self._loop, eid, "stderr", child.popen.stderr)
        slot.child = child
        slot.state = ExecutorSlotState.RUNNING
        slot.starts += 1
        self.log.info("executor %s started (pid %d)", slot.executor_id, child.pid,
                      extra={"fields": {"executor_id": slot.executor_id, "pid": child.pid}})

    def _on_exit(self, child: ChildProcess, rc: int) -> None:
        slot = next((s for s in self._slots.values() if s.child is child), None)
        if slot is None:
            return
        slot.child = None
        self.credentials.revoke(slot.executor_id)     # an exited executor's secret attaches nobody
        slot.last_exit_code = rc
        how = f"killed by signal {-rc}" if rc < 0 else f"exited with code {rc}"
        reason = self.sandbox.exit_reason(slot.executor_id, rc) if self.sandbox is not None else None
        if reason:
            how += f" by its {reason}"
            label = reason.removesuffix(" limit")        # "memory", "process"
            self.limit_kills[label] = self.limit_kills.get(label, 0) + 1
            self.counters.executor_limit_kills[label] = self.counters.executor_limit_kills.get(label, 0) + 1
        level = logging.INFO if self._stopping else logging.WARNING
        self.log.log(level, "executor %s (pid %d) %s", slot.executor_id, child.pid, how,
                     extra={"fields": {"executor_id": slot.executor_id, "pid": child.pid,
                                       "returncode": rc, **({"limit": reason} if reason else {})}})
        self._after_exit(slot)

    def _after_exit(self, slot: _Slot) -> None:
        if self._stopping or not self.restart_enabled:
            slot.state = ExecutorSlotState.STOPPED
            return
        now = self.clock_ms()
        times = slot.restart_times
        while times and now - times[0] >= self.restart_window_ms:
            times.popleft()
        assert self._loop is not None
        if len(times) >= self.max_restarts:
            slot.state = ExecutorSlotState.BACKOFF
            slot.backoffs += 1
            self.log.error(
                "executor %s restarted %d times within %d ms; backing off for %d ms",
                slot.executor_id, len(times), self.restart_window_ms, self.backoff_ms,
                extra={"fields": {"executor_id": slot.executor_id, "backoff_ms": self.backoff_ms}})
            slot.timer = self._loop.call_later(self.backoff_ms / 1000, self._restart, slot, True)
        else:
            slot.state = ExecutorSlotState.WAITING
            slot.timer = self._loop.call_later(self.restart_delay_ms / 1000, self._restart, slot, False)

    def _restart(self, slot: _Slot, after_backoff: bool) -> None:
        slot.timer = None
        if self._stopping:
            slot.state = ExecutorSlotState.STOPPED
            return
        if after_backoff:
            slot.restart_times.clear()
        slot.restart_times.append(self.clock_ms())
        slot.restarts += 1
        self.counters.executor_restarts += 1
        self._spawn(slot)

    def limit_kill_reason(self, executor_id: str) -> str | None:
        """"memory limit" when the executor's sandbox cgroup OOM-killed it (known as
        soon as its connection drops, before its exit is reaped), else None."""
        if self.sandbox is None:
            return None
        return self.sandbox.limit_kill_reason(executor_id)

    # ---- operations and views ----
    def kill_executor(self, executor_id: str) -> bool:
        """SIGKILL the executor's process (wedge backstop); it restarts as after
        any exit. True when a running process was signalled."""
        slot = self._slots.get(executor_id)
        if slot is None or slot.child is None or not slot.child.kill():
            return False
        slot.kills += 1  # Metrics.executor_wedge_kills is counted by the caller
        self.log.warning("killed executor %s (pid %d)", executor_id, slot.child.pid,
                         extra={"fields": {"executor_id": executor_id, "pid": slot.child.pid}})
        return True

    def pid_of(self, executor_id: str) -> int | None:
        slot = self._slots.get(executor_id)
        return slot.child.pid if slot is not None and slot.child is not None else None

    def executor_ids(self) -> list[str]:
        return list(self._slots)

    def states(self) -> dict[str, ExecutorSlotState]:
        return {eid: s.state for eid, s in self._slots.items()}

    def slot_info(self) -> list[SlotInfo]:
        return [SlotInfo(s.executor_id, s.state, s.child.pid if s.child else None, s.starts,
                         s.restarts, s.kills, s.backoffs, s.spawn_failures, s.last_exit_code)
                for s in self._slots.values()]

    @property
    def restarts_total(self) -> int:
        return sum(s.restarts for s in self._slots.values())

    @property
    def kills_total(self) -> int:
        return sum(s.kills for s in self._slots.values())
