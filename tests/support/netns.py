"""Hosts on a private network of network namespaces, for multi-host fault tests.

``Network(["h1", "h2"])`` makes one namespace per host and one more for the
switch: a Linux bridge that lives in a namespace of its own, with one veth pair
per host (the host end is ``eth0`` in the host's namespace, the switch end is
plugged into the bridge). Each host gets an address from a private /24 that only
these namespaces know; no namespace has a route out, so no packet leaves them.
Every name carries a random run id (``bx<6 hex>-...``), so a leftover of an
earlier run (or another test running at the same time) cannot clash.

``cut(host)`` takes the host's switch port down (``ip link set ... down`` on
the switch end): the host keeps its address and its processes keep running,
and what it sends is silently lost, like a pulled cable or a dead switch port
(no RST, no ICMP: the peers only learn from timeouts). ``restore(host)`` plugs
it back in.

``popen(host, argv)`` runs a process inside a host (``ip netns exec``, which
execs the command, so the Popen's pid is the process itself). ``close()``
kills every process left in the namespaces (its own and any others found with
``ip netns pids``) and deletes them; the context manager calls it on any exit,
and a failed ``create()`` undoes what it made.

    with Network(["a", "b"]) as net:
        net.popen("a", ["sleep", "1"])
        net.addr("b")                # "10.77.x.2"
        net.cut("b"); net.restore("b")
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence

__all__ = ["Network", "NetnsUnavailable", "missing_capability"]

IP_TIMEOUT_S = 10.0


class NetnsUnavailable(RuntimeError):
    """The machine cannot make network namespaces (no iproute2, no capability)."""


def missing_capability() -> str | None:
    """Why this process cannot build a Network (None: it can). Tries what the
    tests need for real: a namespace with a bridge and a veth pair in it."""
    if shutil.which("ip") is None:
        return "iproute2 (`ip`) is not installed: run `make iproute2` (apt-get install iproute2)"
    name = f"bxprobe{secrets.token_hex(3)}"
    try:
        _ip("netns", "add", name)
    except NetnsUnavailable as exc:
        return f"cannot create a network namespace (needs CAP_SYS_ADMIN): {exc}"
    try:
        _ip("-n", name, "link", "add", "br0", "type", "bridge")
        _ip("-n", name, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
    except NetnsUnavailable as exc:
        return f"cannot create a bridge / veth pair in a namespace (kernel modules bridge, veth): {exc}"
    finally:
        try:
            _ip("netns", "delete", name)
        except NetnsUnavailable:
            pass
    return None


def _ip(*args: str) -> str:
    try:
        r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsUnavailable(f"ip {' '.join(args)}: {exc}") from exc
    if r.returncode != 0:
        raise NetnsUnavailable(f"ip {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


class Network:
    """Hosts (one network namespace each) on one bridge in a switch namespace."""

    def __init__(self, hosts: Sequence[str], *, run_id: str | None = None) -> None:
        if not hosts or len(set(hosts)) != len(hosts) or len(hosts) > 250:
            raise ValueError(f"hosts must be 1..250 distinct names, got {list(hosts)!r}")
        self.run_id = run_id or secrets.token_hex(3)
        self.hosts = list(hosts)
        self.switch = f"bx{self.run_id}-sw"
        # 10.77.N.0/24 with N from the run id: private, and different between runs
        # (although the namespaces never see each other's addresses anyway).
        self.subnet = f"10.77.{int(self.run_id, 16) % 250 + 1}"
        self._ns = {h: f"bx{self.run_id}-{i}" for i, h in enumerate(self.hosts)}
        self._port = {h: f"p{i}" for i, h in enumerate(self.hosts)}
        self._addr = {h: f"{self.subnet}.{i + 1}" for i, h in enumerate(self.hosts)}
        self._made: list[str] = []
        self._procs: list[subprocess.Popen] = []

    # ---- names and addresses ------------------------------------------------------

    def ns(self, host: str) -> str:
        """The network namespace of ``host``."""
        return self._ns[host]

    def addr(self, host: str) -> str:
        """The host's IPv4 address on the private network."""
        return self._addr[host]

    def exec_args(self, host: str, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self._ns[host], *argv]

    # ---- lifecycle ------------------------------------------------------------------

    def create(self) -> "Network":
        try:
            self._add_ns(self.switch)
            _ip("-n", self.switch, "link", "set", "lo", "up")
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
            for h in self.hosts:
                ns, port = self._ns[h], self._port[h]
                self._add_ns(ns)
                _ip("-n", ns, "link", "set", "lo", "up")
                # Made in the switch namespace with its peer straight in the host's:
                # no interface of this network ever exists in the caller's namespace.
                _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
                _ip("-n", self.switch, "link", "set", port, "master", "br0")
                _ip("-n", self.switch, "link", "set", port, "up")
                _ip("-n", ns, "addr", "add", f"{self._addr[h]}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
        except BaseException:
            self.close()
            raise
        return self

    def _add_ns(self, name: str) -> None:
        _ip("netns", "add", name)
        self._made.append(name)

    def close(self) -> None:
        """Kill what runs in the namespaces, then delete them (the veth pairs and the
        bridge go with them). Safe to call twice, and after a partial create()."""
        for p in self._procs:
            if p.poll() is None:
                p.kill()
        for p in self._procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for name in reversed(self._made):
            self._kill_all_in(name)
        for name in reversed(self._made):
            try:
                _ip("netns", "delete", name)
            except NetnsUnavailable:
                pass
        self._made = []

    @staticmethod
    def _kill_all_in(name: str) -> None:
        try:
            pids = [int(p) for p in _ip("netns", "pids", name).split()]
        except (NetnsUnavailable, ValueError):
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if os.path.exists(f"/proc/{p}")]
            time.sleep(0.02)

    def __enter__(self) -> "Network":
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def existing(self) -> list[str]:
        """This run's namespaces that exist now (empty after close())."""
        listed = {line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()}
        return sorted(n for n in [self.switch, *self._ns.values()] if n in listed)

    # ---- processes and faults -----------------------------------------------------------

    def popen(self, host: str, argv: Sequence[str], **kw) -> subprocess.Popen:
        """A process inside ``host``; killed by close() if still running."""
        p = subprocess.Popen(self.exec_args(host, argv), **kw)
        self._procs.append(p)
        return p

    def run(self, host: str, argv: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess:
        return subprocess.run(self.exec_args(host, argv), capture_output=True, text=True, timeout=timeout)

    def cut(self, host: str) -> None:
        """Unplug the host from the switch: its traffic is dropped silently."""
        _ip("-n", self.switch, "link", "set", self._port[host], "down")

    def restore(self, host: str) -> None:
        """Plug the host back in."""
        _ip("-n", self.switch, "link", "set", self._port[host], "up")
