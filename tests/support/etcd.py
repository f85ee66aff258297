"""A real etcd server for tests.

`EtcdServer` runs the system `etcd` binary (Debian etcd-server 3.4) on free
loopback ports with a private data dir. It can be
stopped and started again on the same ports and data dir, which is what outage
tests need. Nothing is mocked: clients talk gRPC to a real server.

Ports are picked once (bind :0, read, close); a start that loses the port race is
retried on fresh ports, but only before the first successful start, because a
restart must keep the endpoint the code under test already knows.

Usage:
    with EtcdServer() as etcd:            # started and healthy
        client = aetcd.Client(*etcd.host_port)
        etcd.stop(); etcd.start()         # outage
    etcd_server = etcd_fixture()          # in a conftest: a pytest fixture
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.binaries import missing
from tests.support.server_process import log_tail, terminate

__all__ = ["EtcdServer", "EtcdUnavailable", "enable_auth", "etcd_binary", "etcd_fixture", "free_port"]

HEALTH_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0


class EtcdUnavailable(RuntimeError):
    """etcd is not installed or did not become healthy."""


def etcd_binary() -> str | None:
    """The etcd executable: $ETCD_BIN, then PATH, then /usr/bin/etcd."""
    explicit = os.environ.get("ETCD_BIN")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    found = shutil.which("etcd")
    if found:
        return found
    return "/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _distinct_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        p = free_port()
        if p not in ports:
            ports.append(p)
    return ports


class EtcdServer:
    """One single-member etcd cluster on 127.0.0.1."""

    def __init__(self, *, name: str = "t", data_dir: str | os.PathLike | None = None,
                 binary: str | None = None, client_port: int | None = None,
                 tls: tuple[str, str, str] | None = None) -> None:
        self.name = name
        # (server cert, server key, client CA): clients speak TLS and must present
        # a certificate signed by the CA (etcd --client-cert-auth).
        self.tls = tls
        self.binary = binary or etcd_binary()
        self._own_dir = data_dir is None
        self._base = Path(tempfile.mkdtemp(prefix="blockx-etcd-")) if data_dir is None else Path(data_dir)
        self.data_dir = self._base / "data"
        self.log_path = self._base / "etcd.log"
        self.client_port = 0
        self.peer_port = 0
        self.metrics_port = 0
        self._proc: subprocess.Popen | None = None
        self._started_once = False
        # A caller may fix the client port in advance (e.g. to point a client at
        # it before etcd exists); the other ports are still picked freely.
        self._fixed_client_port = client_port

    # ---- addresses --------------------------------------------------------
    @property
    def endpoint(self) -> str:
        """"127.0.0.1:P", the form ETCD_ENDPOINTS takes."""
        return f"127.0.0.1:{self.client_port}"

    @property
    def host_port(self) -> tuple[str, int]:
        return "127.0.0.1", self.client_port

    @property
    def client_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.client_port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # ---- lifecycle --------------------------------------------------------
    def start(self, timeout: float = HEALTH_TIMEOUT_S) -> "EtcdServer":
        """Start (or restart on the same ports and data dir) and wait until healthy."""
        if self.running:
            return self
        if self.binary is None:
            raise EtcdUnavailable("etcd binary not found (install etcd-server, or set ETCD_BIN)")
        attempts = 1 if self._started_once else 3
        last_error: Exception | None = None
        for _ in range(attempts):
            if not self._started_once:
                self.client_port, self.peer_port, self.metrics_port = _distinct_ports(3)
                if self._fixed_client_port:
                    while self._fixed_client_port in (self.peer_port, self.metrics_port):
                        self.peer_port, self.metrics_port = _distinct_ports(2)
                    self.client_port = self._fixed_client_port
            try:
                self._spawn()
                self._wait_healthy(timeout)
                self._started_once = True
                return self
            except EtcdUnavailable as exc:
                last_error = exc
                self._terminate(kill=True)
        raise EtcdUnavailable(f"etcd did not start: {last_error}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, then wait for the PID so the ports are free for a restart."""
        self._terminate(kill=False, timeout=timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, not a clean shutdown."""
        self._terminate(kill=True)

    async def astart(self, timeout: float = HEALTH_TIMEOUT_S) -> "EtcdServer":
        # In a thread, so the event loop under test keeps running meanwhile.
        return await asyncio.to_thread(self.start, timeout)

    async def astop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        await asyncio.to_thread(self.stop, timeout)

    def close(self) -> None:
        """Stop and remove the temporary directory (if this object created it)."""
        self._terminate(kill=False)
        if self._own_dir:
            shutil.rmtree(self._base, ignore_errors=True)

    def __enter__(self) -> "EtcdServer":
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals --------------------------------------------------------
    def _spawn(self) -> None:
        peer = f"http://127.0.0.1:{self.peer_port}"
        args = [
            self.binary,
            "--name", self.name,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.client_url,
            "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{self.name}={peer}",
            "--listen-metrics-urls", f"http://127.0.0.1:{self.metrics_port}",
            "--logger=zap",
        ]
        if self.tls:
            cert, key, ca = self.tls
            args += ["--cert-file", cert, "--key-file", key, "--trusted-ca-file", ca, "--client-cert-auth"]
        self._base.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== start {time.strftime('%H:%M:%S')} ports {self.client_port}/{self.peer_port}/{self.metrics_port}\n".encode())
            log.flush()
            # Own session: a Ctrl-C in the test runner must not reach etcd
            # half-way through a restart test.
            self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True)

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.metrics_port}/health"   # plain HTTP even when clients use TLS
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise EtcdUnavailable(f"etcd exited with {self._proc.returncode}; log tail:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1.0) as resp:
                    if resp.status == 200 and b'"health":"true"' in resp.read():
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() >= deadline:
                raise EtcdUnavailable(f"etcd not healthy after {timeout}s; log tail:\n{self.log_tail()}")
            time.sleep(0.05)

    def _terminate(self, *, kill: bool, timeout: float = STOP_TIMEOUT_S) -> None:
        proc, self._proc = self._proc, None
        terminate(proc, kill=kill, timeout=timeout)

    def log_tail(self, n: int = 30) -> str:
        return log_tail(self.log_path, n)


def etcd_fixture(scope: str = "function", name: str = "etcd_server"):
    """A pytest fixture yielding a started `EtcdServer`, stopped and removed after.

    A missing etcd binary skips the test with the fix in the message under `make
    check`, and fails it under `make test` (tests/support/binaries.py): these suites
    exist to exercise a real server, and CI must not pass by not running them.
    """

    @pytest.fixture(scope=scope, name=name)
    def _fixture() -> Iterator[EtcdServer]:
        if etcd_binary() is None:
            missing("etcd", "run `make etcd` (apt-get install etcd-server) or set ETCD_BIN")
        with EtcdServer() as server:
            yield server

    return _fixture


async def enable_auth(connection, root_password: str, users: dict[str, tuple[str, list[str]]]) -> None:
    """Turn etcd's authentication on, through its Auth API over ``connection`` (a
    blockx.etcd.connection.EtcdConnection, e.g. with the client certificate of a
    --client-cert-auth server): a root user, then for each ``name: (password,
    [key prefixes])`` a user with a role that may read and write those prefixes.
    After it, every request needs a user's token (or a certificate naming a user)."""
    from aetcd import rpc
    from aetcd.rpc import auth_pb2

    from blockx.etcd.prefix_watch import prefix_range_end

    async with connection.channel(connection.endpoints[0]) as ch:
        auth = rpc.AuthStub(ch)
        await auth.UserAdd(rpc.AuthUserAddRequest(name="root", password=root_password), timeout=5)
        await auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user="root", role="root"), timeout=5)
        for name, (password, prefixes) in users.items():
            role = f"{name}-role"
            await auth.RoleAdd(rpc.AuthRoleAddRequest(name=role), timeout=5)
            for prefix in prefixes:
                perm = auth_pb2.Permission(permType=auth_pb2.Permission.READWRITE, key=prefix.encode(),
                                           range_end=prefix_range_end(prefix.encode()))
                await auth.RoleGrantPermission(rpc.AuthRoleGrantPermissionRequest(name=role, perm=perm), timeout=5)
            await auth.UserAdd(rpc.AuthUserAddRequest(name=name, password=password), timeout=5)
            await auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user=name, role=role), timeout=5)
        await auth.AuthEnable(rpc.AuthEnableRequest(), timeout=5)
