"""Start a child process from the grpc-loaded Worker and watch it exit, thread-free.

Why this way:
- subprocess.Popen with close_fds=True and no preexec_fn / user / group change:
  CPython's _posixsubprocess then starts the child with vfork()+exec on Linux.
  vfork runs no pthread_atfork handlers, so gRPC's fork hooks never fire and
  nothing of the Worker (threads, grpc state, the event loop) is duplicated; the
  child is a fresh interpreter. uvloop's own subprocess support would fork().
  preexec_fn is never used: it forces a real fork() in a threaded process.
- close_fds=True: the child inherits no listener, grpc or etcd socket; only
  `pass_fds` (the pipe its attach secret is read from) stay open in it.
- start_new_session=True: a Ctrl-C on the Worker's terminal reaches the Worker
  only; the Worker drains, then stops its executors itself (the executor exits
  when its Worker connection closes, so a killed Worker leaves no orphans).
- Exit watching: os.pidfd_open(pid) registered with loop.add_reader. The fd
  turns readable when the child exits; Popen.poll() then reaps it. Signals go
  through signal.pidfd_send_signal, so a recycled pid is never signalled.
  Without pidfd support (Linux < 5.3, other systems) a 50 ms loop timer polls.
  libuv (uvloop) only reaps children it spawned itself, so nothing else steals
  the exit status.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence

__all__ = ["ChildProcess"]

_POLL_INTERVAL_S = 0.05
log = logging.getLogger("blockx.executor.spawn")


class ChildProcess:
    """A running child; `on_exit(child, returncode)` fires once on the loop when it
    exits (returncode < 0: killed by that signal)."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], *,
                 loop: asyncio.AbstractEventLoop,
                 on_exit: Callable[[ChildProcess, int], None] | None = None,
                 stdin=subprocess.DEVNULL, stdout=None, stderr=None, cwd: str | None = None,
                 pass_fds: Sequence[int] = ()) -> None:
        self.argv = list(argv)
        self._loop = loop
        self._on_exit = on_exit
        self.returncode: int | None = None
        self._pidfd = -1
        self._poll_handle: asyncio.TimerHandle | None = None
        self._waiters: list[asyncio.Future] = []
        self.popen = subprocess.Popen(
            self.argv, env=dict(env), cwd=cwd, stdin=stdin, stdout=stdout,
            stderr=stderr, close_fds=True, start_new_session=True, pass_fds=tuple(pass_fds))
        self.pid = self.popen.pid
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self._poll_handle = loop.call_later(_POLL_INTERVAL_S, self._poll)
        else:
            loop.add_reader(self._pidfd, self._check)

    @property
    def alive(self) -> bool:
        return self.returncode is None

    def _poll(self) -> None:
        self._poll_handle = None
        self._check()
        if self.returncode is None:
            self._poll_handle = self._loop.call_later(_POLL_INTERVAL_S, self._poll)

    def _check(self) -> None:
        if self.returncode is not None:
            return
        rc = self.popen.poll()
        if rc is not None:
            self._finish(rc)

    def _finish(self, rc: int) -> None:
        self.returncode = rc
        self._detach()
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(rc)
        if self._on_exit is not None:
            try:
                self._on_exit(self, rc)
            except Exception:
                log.exception("exit callback for pid %d failed", self.pid)

    def _detach(self) -> None:
        if self._pidfd >= 0:
            try:
                self._loop.remove_reader(self._pidfd)
            except Exception:  # the loop may already be closed at shutdown
                pass
            os.close(self._pidfd)
            self._pidfd = -1
        if self._poll_handle is not None:
            self._poll_handle.cancel()
            self._poll_handle = None

    def send_signal(self, sig: int) -> bool:
        """True when the signal was delivered to the (still running) child."""
        if self.returncode is not None:
            return False
        try:
            if self._pidfd >= 0:
                signal.pidfd_send_signal(self._pidfd, sig)
            else:
                self.popen.send_signal(sig)
        except ProcessLookupError:
            return False
        return self.popen.returncode is None

    def terminate(self) -> bool:
        return self.send_signal(signal.SIGTERM)

    def kill(self) -> bool:
        return self.send_signal(signal.SIGKILL)

    async def wait(self, timeout_s: float | None = None) -> int | None:
        """The returncode, or None if the child still runs after timeout_s."""
        if self.returncode is not None:
            return self.returncode
        fut = self._loop.create_future()
        self._waiters.append(fut)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except asyncio.TimeoutError:
            return None
        finally:
            if not fut.done():
                fut.cancel()
            if fut in self._waiters:
                self._waiters.remove(fut)

    def detach(self) -> None:
        """Stop watching (the loop is going away); the process is left alone."""
        self._detach()
