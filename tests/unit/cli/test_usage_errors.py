"""Every usage error of a client command exits 2 (blockx.cli.exit), before a
connection is opened; what the worker refuses, or an address where none
answers, exits 1. The worker address given is a real listening socket, so a
command that connected anyway is seen."""
import socket

import pytest

from blockx import cli


@pytest.fixture
def addr():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.setblocking(False)
    yield "127.0.0.1:%d" % s.getsockname()[1]
    try:
        conn, _ = s.accept()
    except BlockingIOError:
        conn = None
    s.close()
    assert conn is None, "a command with a usage error connected to the worker"


def run(capsys, argv):
    try:
        code = cli.main(argv)
    except SystemExit as exc:           # argparse's own usage errors
        code = exc.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv,words", [
    (["submit", "--calls", ""], "column 1"),
    (["submit", "--calls", "add 1 2"], "column 4"),
    (["submit"], "submit needs --calls, --payload or --task-json"),
    (["submit", "--payload", "{x"], "--payload is not valid JSON"),
    (["submit", "--payload", "@/nonexistent/p.json"], "cannot read"),
    (["submit", "--task-json", "/nonexistent/t.json"], "cannot read"),
    (["submit", "--calls", "a", "--payload", "{}"], "either --calls or --payload"),
    (["submit", "--calls", "a", "--builder", "static"], "cannot be used with --builder static"),
    (["submit", "--calls", "a", "--result-config", "{}"], "--result-config needs --result-handler"),
    (["submit", "--calls", "a", "--timeout-ms", "-1"], "--timeout-ms: -1 must be >= 0"),
    (["submit", "--calls", "a", "--max-attempts", "x"], "'x' is not an integer"),
    (["submit", "--calls", "a", "--slot", "s1", "--etcd"], "not allowed with argument --slot"),
    (["submit", "--calls", "a", "--rpc-timeout", "0"], "--rpc-timeout: '0'"),
    (["submit", "--calls", "a", "--connect-timeout", "-1"], "--connect-timeout: '-1'"),
    (["submit", "--calls", "a", "--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
    (["submit", "--calls", "a", "--tls-ca", "/nonexistent/ca.pem"], "cannot read the TLS CA"),
    (["slot", "t1", "--ttl-ms", "-5"], "--ttl-ms: -5 must be >= 0"),
    (["tasks", "--page-size", "-1"], "--page-size is -1"),
    (["top", "--interval", "0"], "argument --interval: '0'"),
    (["top", "--iterations", "-1"], "argument --iterations: -1 must be >= 0"),
    (["result"], "the following arguments are required: TASK_ID"),
])
def test_usage_errors_exit_2_without_connecting(argv, words, addr, capsys, monkeypatch):
    monkeypatch.setenv("BLOCKX_TOKEN", "t")         # no token file lookup
    code, err = run(capsys, [argv[0], "--addr", addr, *argv[1:]])
    assert code == cli.EXIT_USAGE, err
    assert words in err, err


def test_an_address_where_nothing_listens_exits_1(capsys):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                                       # bound, never listened: refused
    code, err = run(capsys, ["result", "t1", "--addr", f"127.0.0.1:{port}"])
    assert code == cli.EXIT_ERROR
    assert err.strip() == f"error: UNAVAILABLE: nothing listens at 127.0.0.1:{port} (connection refused)"
