"""The fleet on an etcd that serves client-certificate TLS only (--client-cert-auth)
with authentication on: real workers whose registration, function code
(FUNCTIONS_SOURCE=etcd) and audit allowlist (AUDIT_ALLOWLIST_ETCD_PREFIX) all go
through the ETCD_* settings; `blockx functions push`, `blockx workers` and
`blockx.client.Cluster` with the same settings, as flags or environment. The wrong
way in (plaintext, a wrong password) is refused by the CLI with a message naming
the setting, and a worker says why it has no code rather than serving none silently."""
import asyncio
import hashlib
import time

import pytest

from blockx.cli import main
from blockx.client import Cluster
from blockx.etcd.connection import EtcdConnection
from blockx.worker.v1 import worker_pb2 as pb
from tests.support.certs import CertAuthority
from tests.support.etcd import EtcdServer, enable_auth
from tests.support.fleet import registry, start_workers
from tests.support.worker import WorkerProcess, outputs

pytestmark = pytest.mark.e2e
PASSWORD = "w0rker-pass"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    d = tmp_path_factory.mktemp("etcd-secured")
    ca = CertAuthority(d, "ca")
    server, client = ca.issue("etcd-server"), ca.issue("etcd-client", server=False)
    pw = d / "worker.password"
    pw.write_text(PASSWORD + "\n")
    with EtcdServer(tls=(server.cert, server.key, ca.cert)) as etcd:
        certs = dict(ca=ca.cert, cert=client.cert, key=client.key)
        asyncio.run(enable_auth(EtcdConnection.create(etcd.endpoint, **certs), "r00t-pass",
                                {"worker": (PASSWORD, ["/blockx/"])}))
        env = {"ETCD_CA_CERT": ca.cert, "ETCD_CERT": client.cert, "ETCD_KEY": client.key,
               "ETCD_USER": "worker", "ETCD_PASSWORD_FILE": str(pw)}
        flags = ["--etcd", etcd.endpoint, "--etcd-ca", ca.cert, "--etcd-cert", client.cert, "--etcd-key",
                 client.key, "--etcd-user", "worker", "--etcd-password-file", str(pw)]
        yield etcd, env, flags, EtcdConnection.create(etcd.endpoint, user="worker", password=PASSWORD, **certs)


def run_cli(argv, capsys):
    code = main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_workers_register_load_pushed_code_audit_it_and_take_tasks_from_cluster(secured, functions_dir, tmp_path,
                                                                                  capsys, monkeypatch):
    etcd, env, flags, conn = secured
    code, out, err = run_cli(["functions", "push", str(functions_dir), *flags], capsys)
    assert code == 0, err
    assert out.startswith("pushed ")
    add_digest = hashlib.sha256((functions_dir / "add.py").read_bytes()).hexdigest()

    async def approve():
        c = conn.client(0, timeout=3)
        try:
            await c.put(f"/blockx/audit/{add_digest}".encode(), b"CR-9")
        finally:
            await c.close()
    asyncio.run(approve())

    empty = tmp_path / "empty"        # FUNCTIONS_DIR is not read with FUNCTIONS_SOURCE=etcd
    empty.mkdir()
    workers = start_workers(etcd, 2, empty, {**env, "FUNCTIONS_SOURCE": "etcd", "AUDIT_MODE": "enforce",
                                             "AUDIT_ALLOWLIST_ETCD_PREFIX": "/blockx/audit/"}, connection=conn)
    try:
        for w in workers:
            assert w.find_event("function_code_etcd")["loaded"] is True
        assert set(registry(etcd, connection=conn)) == {f"127.0.0.1:{w.port}" for w in workers}

        # The CLI with the settings from the environment the workers were given.
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        code, out, err = run_cli(["workers", "--etcd", etcd.endpoint], capsys)
        assert code == 0, err
        assert out.splitlines()[-1] == "2 worker(s)"
        code, out, err = run_cli(["status", "--etcd", etcd.endpoint], capsys)
        assert code == 0, err
        rows = [ln.split() for ln in out.splitlines() if ln.startswith("127.0.0.1:")]
        assert len(rows) == 2 and all(r[1] == "ready" and r[-1] == "mtls,user=worker" for r in rows), out

        async def through_cluster():
            # Endpoints only: TLS and the etcd user come from the same ETCD_* environment.
            async with Cluster(etcd.endpoint, wait_for_worker_s=10) as cluster:
                oks = await asyncio.gather(*(cluster.submit(calls=[("add", [i, 1])]) for i in range(20)))
                refused = await cluster.submit(calls=[("square", [3])])
                return oks, refused
        oks, refused = asyncio.run(through_cluster())
        assert [o.outputs for o in oks] == [[i + 1] for i in range(20)]
        assert {o.worker for o in oks} <= {f"127.0.0.1:{w.port}" for w in workers}
        assert refused.state == "FAILED" and "AUDIT_REJECTED" in refused.failure_message, \
            "the audit allowlist read from the secured etcd approves add only"
    finally:
        for w in workers:
            w.stop()


def test_the_cli_refuses_plaintext_and_a_wrong_password_naming_the_setting(secured, tmp_path, capsys, monkeypatch):
    etcd, env, flags, _conn = secured
    for k in ("ETCD_CA_CERT", "ETCD_CERT", "ETCD_KEY", "ETCD_USER", "ETCD_PASSWORD", "ETCD_PASSWORD_FILE"):
        monkeypatch.delenv(k, raising=False)
    code, out, err = run_cli(["workers", "--etcd", etcd.endpoint, "--timeout", "2"], capsys)
    assert code == 1 and out == ""
    assert "set ETCD_CA_CERT" in err, err
    code, _out, err = run_cli(["functions", "list", "--etcd", etcd.endpoint, "--timeout", "2"], capsys)
    assert code == 1 and "set ETCD_CA_CERT" in err, err
    wrong = tmp_path / "wrong"
    wrong.write_text("guess\n")
    bad = [*flags[:-1], str(wrong)]
    code, out, err = run_cli(["functions", "list", *bad], capsys)
    assert code == 1 and out == ""
    assert "etcd refused user 'worker'" in err and "ETCD_PASSWORD" in err, err
    code, out, err = run_cli(["submit", *bad[:1], "--etcd=" + etcd.endpoint, *bad[2:], "--calls", "add:1,2",
                              "--rpc-timeout", "2"], capsys)
    assert code != 0 and "etcd refused user 'worker'" in err, err


def test_a_worker_with_a_wrong_password_says_why_it_has_no_code(secured, tmp_path):
    etcd, env, _flags, conn = secured
    w = WorkerProcess({**env, "ETCD_ENDPOINTS": etcd.endpoint, "ETCD_PASSWORD_FILE": "",
                       "ETCD_PASSWORD": "guess", "FUNCTIONS_SOURCE": "etcd", "WORKER_HEARTBEAT_INTERVAL": "100ms"},
                      functions_dir=tmp_path, executors=1)
    w.start(ready=False)
    try:
        assert w.wait_event("function_code_etcd", timeout=20)["loaded"] is False
        deadline = time.monotonic() + 10
        while not any("etcd refused user 'worker'" in ln and "ETCD_PASSWORD" in ln for ln in w.lines):
            assert time.monotonic() < deadline, "no log line says the etcd user was refused:\n" + "\n".join(w.lines)
            time.sleep(0.05)
        w.wait_event("etcd_unavailable", timeout=10)
        assert f"127.0.0.1:{w.port}" not in registry(etcd, connection=conn), "not registered with a wrong password"
        res = w.submit_calls("no-code", [("add", [1, 2])])
        assert res is not None
        got = w.wait_terminal("no-code")
        assert got.state == pb.TASK_STATE_FAILED and "add" in got.failure_message
    finally:
        w.stop()
