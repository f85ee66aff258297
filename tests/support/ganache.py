"""A real Ethereum JSON-RPC node for tests: ganache (npm), installed by `make ganache`
into .npm-tools/ of the project.

`GanacheNode` starts it on a free loopback port with the deterministic wallet
(the same ten funded accounts every run), waits until it answers
eth_blockNumber (bounded), and stops it. Its stdout (one line per method served,
when `log_methods` is on) is kept in a file the tests and the benchmark can count.

Usage:
    with GanacheNode() as node:
        node.url                            # http://127.0.0.1:P
    ganache_node = ganache_fixture(scope="session")   # in a conftest
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import pytest

from tests.support.etcd import free_port

__all__ = ["ACCOUNT0", "ACCOUNT0_BALANCE_WEI", "GanacheNode", "GanacheUnavailable", "ganache_bin",
           "ganache_fixture"]

ROOT = pathlib.Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0
# The first account of --wallet.deterministic, funded with the default 1000 ETH.
ACCOUNT0 = "0x90F8bf6A479f320ead074411a4B0e7944Ea8c9C1"
ACCOUNT0_BALANCE_WEI = 1000 * 10**18


class GanacheUnavailable(RuntimeError):
    """ganache is not installed or did not start."""


def ganache_bin() -> str | None:
    """$GANACHE_BIN, then the project's .npm-tools install, then PATH."""
    explicit = os.environ.get("GANACHE_BIN")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    local = ROOT / ".npm-tools" / "node_modules" / ".bin" / "ganache"
    if os.access(local, os.X_OK):
        return str(local)
    return shutil.which("ganache")


class GanacheNode:
    def __init__(self, *, log_methods: bool = False) -> None:
        self.bin = ganache_bin()
        self.base = pathlib.Path(tempfile.mkdtemp(prefix="blockx-ganache-"))
        self.log_path = self.base / "ganache.log"
        self.log_methods = log_methods
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> GanacheNode:
        if self.bin is None:
            raise GanacheUnavailable("ganache is not installed: run `make ganache`")
        self.port = free_port()
        args = [self.bin, "--wallet.deterministic", "--server.host", "127.0.0.1", "--server.port", str(self.port),
                "--chain.chainId", "1337", "--miner.instamine", "eager"]
        if not self.log_methods:
            args.append("--logging.quiet")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.base, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise GanacheUnavailable(f"ganache exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                self.call("eth_blockNumber")
                return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise GanacheUnavailable(f"ganache did not answer within {START_TIMEOUT_S} s:\n{self.log_tail()}")

    def call(self, method: str, params: list | None = None, timeout: float = 5.0):
        """One JSON-RPC request, read directly (not through a Worker)."""
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []}).encode()
        req = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            doc = json.loads(r.read())
        if "error" in doc:
            raise RuntimeError(f"{method}: {doc['error']}")
        return doc["result"]

    def methods_served(self, method: str) -> int:
        """How many times the node logged serving `method` (needs log_methods=True)."""
        return sum(1 for line in self.log_path.read_text(errors="replace").splitlines() if line.strip() == method)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def __enter__(self) -> GanacheNode:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def ganache_fixture(scope: str = "session"):
    """A pytest fixture yielding a started GanacheNode (fails clearly when ganache is missing)."""

    @pytest.fixture(scope=scope)
    def _node():
        node = GanacheNode()
        try:
            node.start()
        except GanacheUnavailable as exc:
            node.close()
            pytest.fail(str(exc))
        try:
            yield node
        finally:
            node.close()

    return _node
