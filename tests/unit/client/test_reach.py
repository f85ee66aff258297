"""A client of an address where no Worker answers fails at once and says why
(blockx.client.reach), over real loopback sockets: a port nobody listens on
(refused), a socket that listens and never answers (no answer), a socket that
accepts and hangs up (a failed handshake). The library, the CLI and `blockx
health` alike; bounded, and well under the old 10 s wait."""
from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time

import pytest

from blockx import cli
from blockx.client import NoAnswer, NothingListens, Unavailable, Unreachable, WorkerClient, connect

BOUND_S = 5.0        # "well under the old 10 s": no tighter, the machine may be loaded


def refused_addr() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))         # bound but never listening: a connection to it is refused
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


@pytest.fixture
def silent_addr():
    """Listens (the kernel completes the TCP handshake) and never says a word."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield "127.0.0.1:%d" % s.getsockname()[1]
    s.close()


@pytest.fixture
def hangup_addr():
    """Accepts each connection and closes it at once: open, but no gRPC."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    s.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = s.accept()
            except (socket.timeout, OSError):
                continue
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield "127.0.0.1:%d" % s.getsockname()[1]
    stop.set()
    t.join(5)
    s.close()


async def _connect(addr: str, **kw) -> tuple[BaseException, float]:
    t0 = time.monotonic()
    with pytest.raises(Unavailable) as ei:
        await WorkerClient(addr, token=None, **kw).connect()
    return ei.value, time.monotonic() - t0


async def test_refused_is_nothing_listens_at_once():
    addr = refused_addr()
    err, took = await _connect(addr)
    assert isinstance(err, NothingListens) and isinstance(err, Unreachable)
    assert err.message == f"nothing listens at {addr} (connection refused)"
    assert err.code.name == "UNAVAILABLE"
    assert took < BOUND_S


async def test_refused_is_told_at_once_even_with_a_long_connect_timeout():
    # a refusal is not retried until the timeout: the worker is not there
    err, took = await _connect(refused_addr(), connect_timeout_s=30)
    assert isinstance(err, NothingListens) and took < BOUND_S


async def test_a_listener_that_never_answers_is_no_answer_after_the_connect_timeout(silent_addr):
    err, took = await _connect(silent_addr)
    assert isinstance(err, NoAnswer)
    assert err.message == f"no answer from {silent_addr} within 1 s"
    assert 0.9 <= took < BOUND_S


async def test_the_connect_timeout_is_the_callers(silent_addr):
    err, took = await _connect(silent_addr, connect_timeout_s=0.3)
    assert isinstance(err, NoAnswer) and "within 0.3 s" in err.message and took < BOUND_S


async def test_an_open_port_without_grpc_is_a_failed_handshake(hangup_addr):
    err, took = await _connect(hangup_addr, connect_timeout_s=3)
    assert type(err) is Unreachable, err
    assert f"{hangup_addr} accepts connections, but the gRPC handshake failed" in err.message
    assert took < BOUND_S


def test_the_sync_client_fails_fast_too():
    addr = refused_addr()
    t0 = time.monotonic()
    with pytest.raises(NothingListens):
        connect(addr, token=None)
    assert time.monotonic() - t0 < BOUND_S


def test_the_cli_says_nothing_listens(capsys):
    addr = refused_addr()
    t0 = time.monotonic()
    code = cli.main(["submit", "--addr", addr, "--calls", "add:1,2"])
    assert time.monotonic() - t0 < BOUND_S
    assert code == cli.EXIT_ERROR
    assert capsys.readouterr().err.strip() == f"error: UNAVAILABLE: nothing listens at {addr} (connection refused)"


def test_the_cli_says_no_answer(silent_addr, capsys):
    code = cli.main(["result", "t1", "--addr", silent_addr, "--connect-timeout", "0.5"])
    assert code == cli.EXIT_ERROR
    assert capsys.readouterr().err.strip() == f"error: UNAVAILABLE: no answer from {silent_addr} within 0.5 s"


def test_health_of_port_1_says_refused_not_deadline_exceeded():
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "blockx", "health", "--addr", "127.0.0.1:1"],
                       capture_output=True, text=True, timeout=60)
    assert time.monotonic() - t0 < 30                # a whole interpreter start, on a loaded machine
    assert r.returncode == 2, r.stderr
    assert "nothing listens at 127.0.0.1:1 (connection refused)" in r.stderr
    assert "DEADLINE_EXCEEDED" not in r.stderr


def test_health_of_a_silent_port_says_no_answer(silent_addr, capsys):
    t0 = time.monotonic()
    code = cli.main(["health", "--addr", silent_addr])
    assert time.monotonic() - t0 < BOUND_S
    assert code == 2
    assert f"no answer from {silent_addr} within 1 s" in capsys.readouterr().err


def test_the_cli_default_connect_timeout_is_the_librarys():
    from blockx.cli.connection import DEFAULT_CONNECT_TIMEOUT_S as CLI_DEFAULT
    from blockx.client.reach import DEFAULT_CONNECT_TIMEOUT_S

    assert CLI_DEFAULT == DEFAULT_CONNECT_TIMEOUT_S
    assert cli.build_parser().parse_args(["result", "t"]).connect_timeout == DEFAULT_CONNECT_TIMEOUT_S


async def test_many_refusals_in_a_row_stay_fast():
    # no hidden back-off grows between attempts of one process
    t0 = time.monotonic()
    for _ in range(5):
        with pytest.raises(NothingListens):
            await WorkerClient(refused_addr(), token=None).connect()
    assert time.monotonic() - t0 < BOUND_S
    await asyncio.sleep(0)
