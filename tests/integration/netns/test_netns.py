"""tests/support/netns.py for real: namespaces, a bridge, veth pairs, a cut, cleanup."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.binaries import unavailable
from tests.support.netns import Network, missing_capability

# A TCP round trip from inside a namespace: connect to host:port, send, read the echo.
CONNECT = ("import socket,sys\n"
           "s=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=float(sys.argv[3]))\n"
           "s.sendall(b'ping'); print(s.recv(4).decode())\n")
SERVE = ("import socket,sys\n"
         "l=socket.socket(); l.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
         "l.bind((sys.argv[1],int(sys.argv[2]))); l.listen(8); print('up',flush=True)\n"
         "while True:\n c,_=l.accept(); c.sendall(c.recv(4)); c.close()\n")


@pytest.fixture
def network():
    if os.geteuid() != 0:
        unavailable("network namespaces need root (ip netns add); run as root")
    why = missing_capability()
    if why:
        unavailable(f"cannot run the multi-host tests: {why}")
    with Network(["a", "b"]) as net:
        yield net


def _echo_server(net: Network, host: str) -> subprocess.Popen:
    p = net.popen(host, [sys.executable, "-c", SERVE, net.addr(host), "7070"], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "up"
    return p


def _connect(net: Network, src: str, dst: str, timeout: float = 2.0) -> subprocess.CompletedProcess:
    return net.run(src, [sys.executable, "-c", CONNECT, net.addr(dst), "7070", str(timeout)], timeout=timeout + 10)


def test_hosts_talk_over_the_bridge_and_a_cut_drops_silently(network):
    net = network
    assert net.addr("a") != net.addr("b") and net.addr("a").startswith("10.77.")
    _echo_server(net, "b")
    ok = _connect(net, "a", "b")
    assert ok.returncode == 0 and ok.stdout.strip() == "ping", ok.stderr
    net.cut("b")
    cut = _connect(net, "a", "b", timeout=1.0)
    # Dropped, not refused: the connect runs into its timeout (no RST, no ICMP).
    assert cut.returncode != 0 and "timed out" in cut.stderr, cut.stderr
    net.restore("b")
    back = _connect(net, "a", "b", timeout=5.0)
    assert back.returncode == 0 and back.stdout.strip() == "ping", back.stderr


def test_no_traffic_leaves_the_namespaces(network):
    net = network
    _echo_server(net, "b")
    # The caller's namespace has no route to the private network...
    r = subprocess.run([sys.executable, "-c", CONNECT, net.addr("b"), "7070", "1"], capture_output=True, text=True,
                       timeout=15)
    assert r.returncode != 0
    # ...and a host has no route anywhere else (only its /24 and loopback).
    routes = net.run("a", ["ip", "route", "show"]).stdout
    assert "default" not in routes and routes.strip().startswith(f"{net.subnet}.0/24"), routes


def test_close_kills_what_runs_inside_and_deletes_every_namespace():
    if os.geteuid() != 0:
        unavailable("network namespaces need root (ip netns add); run as root")
    why = missing_capability()
    if why:
        unavailable(f"cannot run the multi-host tests: {why}")
    net = Network(["a", "b"]).create()
    made = net.existing()
    assert len(made) == 3 and all(n.startswith(f"bx{net.run_id}-") for n in made)
    mine = net.popen("a", ["sleep", "300"])
    # One started by someone else inside the namespace is found and killed too.
    other = subprocess.Popen(net.exec_args("b", ["sleep", "300"]))
    try:
        net.close()
        assert mine.wait(5) is not None and other.wait(5) is not None
        assert net.existing() == []
        net.close()                     # twice is harmless
    finally:
        for p in (mine, other):
            if p.poll() is None:
                p.kill()


def test_two_runs_get_distinct_names():
    a, b = Network(["x"]), Network(["x"])
    assert a.ns("x") != b.ns("x") and a.switch != b.switch
    assert len(a.ns("x")) <= 15       # short enough for a name everywhere ip shows it
