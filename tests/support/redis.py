"""A real Redis server for tests.

`RedisServer` runs the system `redis-server` (Debian package redis-server) on a
free loopback port with a private working directory and no persistence (no RDB
snapshots, no AOF), so a restart starts empty, as a cache-only Redis does. It can
be stopped, killed and started again on the same port, which is what outage
tests need. Nothing is mocked: clients talk RESP to a real server.

The port is picked once (bind :0, read, close); a start that loses the port race
is retried on a fresh port, but only before the first successful start, because
a restart must keep the URL the code under test already knows.

Usage:
    with RedisServer() as redis:          # started, answering PING
        url = redis.url                   # redis://127.0.0.1:P/0
        redis.kill(); redis.start()       # outage (the restarted server is empty)
    redis_server = redis_fixture()        # in a conftest or test module: a pytest fixture
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.binaries import missing
from tests.support.etcd import free_port
from tests.support.server_process import log_tail, terminate

__all__ = ["RedisServer", "RedisUnavailable", "redis_binary", "redis_fixture"]

READY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0


class RedisUnavailable(RuntimeError):
    """redis-server is not installed or did not answer."""


def redis_binary() -> str | None:
    """The redis-server executable: $REDIS_SERVER_BIN, then PATH, then /usr/bin/redis-server."""
    explicit = os.environ.get("REDIS_SERVER_BIN")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    found = shutil.which("redis-server")
    if found:
        return found
    return "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None


class RedisServer:
    """One redis-server on 127.0.0.1, without persistence."""

    def __init__(self, *, config: dict[str, str] | None = None, port: int | None = None,
                 binary: str | None = None) -> None:
        self.config = dict(config or {})      # extra directives, e.g. {"notify-keyspace-events": "K$"}
        self.binary = binary or redis_binary()
        self._base = Path(tempfile.mkdtemp(prefix="blockx-redis-"))
        self.log_path = self._base / "redis.log"
        self.port = 0
        self._fixed_port = port
        self._proc: subprocess.Popen | None = None
        self._started_once = False

    # ---- addresses --------------------------------------------------------
    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def reserve_port(self) -> int:
        """Pick the port now (before any start), e.g. to point a worker at a Redis not started yet."""
        if not self.port:
            self.port = self._fixed_port or free_port()
            self._fixed_port = self.port
        return self.port

    # ---- lifecycle --------------------------------------------------------
    def start(self, timeout: float = READY_TIMEOUT_S) -> "RedisServer":
        """Start (or restart on the same port) and wait until it answers PING."""
        if self.running:
            return self
        if self.binary is None:
            raise RedisUnavailable("redis-server not found (run `make redis`: apt-get install redis-server, "
                                   "or set REDIS_SERVER_BIN)")
        attempts = 1 if (self._started_once or self._fixed_port) else 3
        last_error: Exception | None = None
        for _ in range(attempts):
            if not self._started_once:
                self.port = self._fixed_port or free_port()
            try:
                self._spawn()
                self._wait_ready(timeout)
                self._started_once = True
                return self
            except RedisUnavailable as exc:
                last_error = exc
                self._terminate(kill=True)
        raise RedisUnavailable(f"redis-server did not start: {last_error}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, then wait for the PID so the port is free for a restart."""
        self._terminate(kill=False, timeout=timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, not a clean shutdown."""
        self._terminate(kill=True)

    async def astart(self, timeout: float = READY_TIMEOUT_S) -> "RedisServer":
        # In a thread, so the event loop under test keeps running meanwhile.
        return await asyncio.to_thread(self.start, timeout)

    def close(self) -> None:
        self._terminate(kill=True)
        shutil.rmtree(self._base, ignore_errors=True)

    def __enter__(self) -> "RedisServer":
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals --------------------------------------------------------
    def _spawn(self) -> None:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self._base),
                "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes",
                "--logfile", ""]
        for key, value in self.config.items():
            args += [f"--{key}", value]
        self._base.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== start {time.strftime('%H:%M:%S')} port {self.port}\n".encode())
            log.flush()
            # Own session: a Ctrl-C in the test runner must not reach Redis mid-test.
            self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RedisUnavailable(f"redis-server exited with {self._proc.returncode}; log tail:\n"
                                       f"{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if time.monotonic() >= deadline:
                raise RedisUnavailable(f"redis-server not answering after {timeout}s; log tail:\n{self.log_tail()}")
            time.sleep(0.02)

    def _terminate(self, *, kill: bool, timeout: float = STOP_TIMEOUT_S) -> None:
        proc, self._proc = self._proc, None
        terminate(proc, kill=kill, timeout=timeout)

    def log_tail(self, n: int = 30) -> str:
        return log_tail(self.log_path, n)


def redis_fixture(scope: str = "function", name: str = "redis_server", config: dict[str, str] | None = None):
    """A pytest fixture yielding a started `RedisServer`, killed and removed after.

    A missing redis-server skips the test with the fix in the message under `make
    check`, and fails it under `make test` (tests/support/binaries.py): CI must run
    these suites."""

    @pytest.fixture(scope=scope, name=name)
    def _fixture() -> Iterator[RedisServer]:
        if redis_binary() is None:
            missing("redis-server", "run `make redis` (apt-get install redis-server) or set REDIS_SERVER_BIN")
        with RedisServer(config=config) as server:
            yield server

    return _fixture
