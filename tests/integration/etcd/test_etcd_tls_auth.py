"""Every etcd client through the one EtcdConnection, against a real etcd with
client-certificate TLS (--client-cert-auth) and authentication on (a root user,
and a `worker` user whose role may read and write /blockx/ only): the Worker's
registration, the prefix watch under the registry view and the function code,
the audit allowlist, the CLI's reads and pushes. Plaintext, a missing client
certificate, a wrong password and no user at all are refused with a message
naming the setting that fixes it."""

from __future__ import annotations

import asyncio

import pytest

from blockx.adapters.audit import EtcdAuditAllowlist
from blockx.adapters.etcd_publisher import EtcdPublisher, PublisherState
from blockx.cli.exit import CLIError
from blockx.cli.fleet import push_functions, read_prefix
from blockx.client.registry import RegistryView
from blockx.etcd.connection import EtcdAuthError, EtcdConnection
from blockx.plugins.function_code.etcd import FunctionCodeEtcd
from tests.integration.etcd.helpers import eventually
from tests.support.certs import CertAuthority
from tests.support.etcd import EtcdServer, enable_auth

ADDR = "10.0.0.7:8081"


async def _async(v):
    return v


@pytest.fixture
def secured(tmp_path):
    """(etcd, {name: EtcdConnection}) for the worker user and each wrong way in."""
    ca = CertAuthority(tmp_path, "ca")
    server, client = ca.issue("etcd-server"), ca.issue("etcd-client", server=False)
    pw = tmp_path / "worker.password"
    pw.write_text("s3cret-worker\n")
    with EtcdServer(tls=(server.cert, server.key, ca.cert)) as etcd:
        certs = dict(ca=ca.cert, cert=client.cert, key=client.key)
        asyncio.run(enable_auth(EtcdConnection.create(etcd.endpoint, **certs), "r00t",
                                {"worker": ("s3cret-worker", ["/blockx/"])}))
        yield etcd, {
            "worker": EtcdConnection.create(etcd.endpoint, user="worker", password_file=str(pw), **certs),
            "root": EtcdConnection.create(etcd.endpoint, user="root", password="r00t", **certs),
            "plaintext": EtcdConnection.create(etcd.endpoint, user="worker", password="s3cret-worker"),
            "no-client-cert": EtcdConnection.create(etcd.endpoint, user="worker", password="s3cret-worker",
                                                    ca=ca.cert),
            "wrong-password": EtcdConnection.create(etcd.endpoint, user="worker", password="guess", **certs),
            "no-user": EtcdConnection.create(etcd.endpoint, **certs),
        }


async def test_registration_watch_audit_and_cli_all_work_through_the_one_connection(secured):
    etcd, conns = secured
    conn = conns["worker"]
    assert conn.describe() == "mtls,user=worker"
    # The CLI's transaction and read (functions push / list, workers).
    rev = await push_functions(conn, [("/blockx/functions/add", b"def main(a, b):\n    return a + b\n")], 3)
    got_rev, kvs = await read_prefix(conn, "/blockx/functions/", 3)
    assert got_rev >= rev and [k for k, _v, _r in kvs] == ["/blockx/functions/add"]

    # The function-code watch (FUNCTIONS_SOURCE=etcd) loads the pushed code.
    fcode = FunctionCodeEtcd(conn, "/blockx/functions/", 60_000)
    view = RegistryView(conn, "/blockx/workers/")
    publisher = EtcdPublisher(conn, "/blockx/workers/", ADDR, lambda: {"ready": True, "freeSlots": 3},
                              interval_ms=50)
    audit = EtcdAuditAllowlist(conn.client(0, timeout=3), "/blockx/audit/")
    try:
        assert await fcode.start(5.0) is True
        assert fcode.current_epoch(0) == rev
        # Registration (lease, put under the user's token) seen by the registry view.
        assert await view.start(5.0) is True
        await publisher.start()
        await eventually(lambda: _async(publisher.state == PublisherState.REGISTERED), what="registered")
        await eventually(lambda: _async(ADDR in view.workers), what="the registry view sees the worker")
        assert view.workers[ADDR].free_slots == 3
        # The audit allowlist reads its prefix.
        await push_functions(conn, [("/blockx/audit/" + "a" * 64, b"CR-1")], 3)
        assert await audit.fetch() is True and audit.approved == {"a" * 64: "CR-1"}
        # A second push moves the watch on.
        rev2 = await push_functions(conn, [("/blockx/functions/add", b"def main(a, b):\n    return b + a\n")], 3)
        await eventually(lambda: _async(fcode.current_epoch(0) == rev2), what="the watch follows a push")
    finally:
        await publisher.deregister()
        await view.stop()
        await fcode.stop()
        await audit.close()
    _r, kvs = await read_prefix(conns["root"], "/blockx/workers/", 3)
    assert kvs == [], "deregistered under the token"


@pytest.mark.parametrize("which, message", [
    ("plaintext", "set ETCD_CA_CERT"),
    ("no-client-cert", "check ETCD_CA_CERT, ETCD_CERT, ETCD_KEY"),
    ("wrong-password", "etcd refused user 'worker': etcdserver: authentication failed"),
    ("no-user", "no etcd user was given: set ETCD_USER and ETCD_PASSWORD"),
])
async def test_the_wrong_way_in_is_refused_naming_the_setting(secured, which, message):
    _etcd, conns = secured
    conn = conns[which]
    with pytest.raises(CLIError, match=message.replace("(", r"\(")):
        await read_prefix(conn, "/blockx/functions/", 2)
    # The watch behind FUNCTIONS_SOURCE=etcd and the registry view: not loaded,
    # and the reason kept for the log line that says so.
    fcode = FunctionCodeEtcd(conn, "/blockx/functions/", 60_000)
    try:
        assert await fcode.start(1.0) is False
        await eventually(lambda: _async(fcode._watch.last_error is not None), what="a recorded reason")
        assert message in fcode._watch.last_error
    finally:
        await fcode.stop()
    # The registration keeps retrying, saying why.
    publisher = EtcdPublisher(conn, "/blockx/workers/", ADDR, lambda: {"ready": True}, interval_ms=50,
                              backoff_initial_ms=50, backoff_max_ms=200)
    await publisher.start()
    try:
        await eventually(lambda: _async(publisher.last_error is not None), what="a failed registration")
        assert publisher.state != PublisherState.REGISTERED
        assert message in publisher.last_error, publisher.last_error
    finally:
        await publisher.deregister()


async def test_a_user_outside_its_role_is_denied_and_says_which_user(secured):
    _etcd, conns = secured
    with pytest.raises(CLIError, match="etcd user 'worker' lacks the role for this key prefix"):
        await read_prefix(conns["worker"], "/elsewhere/", 2)


async def test_the_aetcd_client_authenticates_and_refuses_a_wrong_password(secured):
    _etcd, conns = secured
    ok = conns["worker"].client(0, timeout=3)
    bad = conns["wrong-password"].client(0, timeout=3)
    try:
        await ok.put(b"/blockx/x", b"1")
        assert (await ok.get(b"/blockx/x")).value == b"1"
        with pytest.raises(EtcdAuthError, match="ETCD_PASSWORD"):
            await bad.get(b"/blockx/x")
    finally:
        await ok.close()
        await bad.close()


async def test_the_server_name_is_what_the_certificate_is_checked_for(secured, tmp_path):
    etcd, conns = secured
    w = conns["worker"]
    named = EtcdConnection(w.endpoints, w.tls, "localhost", w.user, w.password)     # a SAN of the certificate
    _rev, kvs = await read_prefix(named, "/blockx/", 2)
    wrong = EtcdConnection(w.endpoints, w.tls, "etcd.elsewhere.example", w.user, w.password)
    with pytest.raises(CLIError, match="ETCD_SERVER_NAME"):
        await read_prefix(wrong, "/blockx/", 2)


def test_settings_that_cannot_work_are_refused_when_made(tmp_path):
    with pytest.raises(ValueError, match="etcd user needs its password"):
        EtcdConnection.create("127.0.0.1:2379", user="worker")
    with pytest.raises(ValueError, match="ETCD_PASSWORD and ETCD_PASSWORD_FILE"):
        EtcdConnection.create("127.0.0.1:2379", user="w", password="a", password_file="/etc/hostname")
    with pytest.raises(ValueError, match="ETCD_PASSWORD_FILE .* cannot be read"):
        EtcdConnection.create("127.0.0.1:2379", user="w", password_file=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="ETCD_SERVER_NAME is a TLS setting"):
        EtcdConnection.create("127.0.0.1:2379", server_name="etcd.internal")
    env = {"ETCD_CA_CERT": "/ca.pem", "ETCD_USER": "w", "ETCD_PASSWORD": "p", "ETCD_SERVER_NAME": "etcd.internal"}
    c = EtcdConnection.from_env("10.0.0.1:2379,10.0.0.2", env)
    assert c.targets == ["10.0.0.1:2379", "10.0.0.2:2379"] and c.tls is not None and c.tls.ca == "/ca.pem"
    assert (c.user, c.password, c.server_name, c.describe()) == ("w", "p", "etcd.internal", "tls,user=w")


async def _forget_every_token(root: EtcdConnection) -> None:
    """Authentication off and on again through the root user: etcd drops every
    token it issued (what a restart does to the tokens it did not persist)."""
    from aetcd import rpc

    async with root.channel(root.endpoints[0]) as ch:
        md = await root.metadata(ch, 5)
        await rpc.AuthStub(ch).AuthDisable(rpc.AuthDisableRequest(), timeout=5, metadata=md)
        await rpc.AuthStub(ch).AuthEnable(rpc.AuthEnableRequest(), timeout=5)


async def test_the_audit_allowlist_authenticates_again_once_etcd_forgot_its_token(secured):
    _etcd, conns = secured
    audit = EtcdAuditAllowlist(conns["worker"].client(0, timeout=3), "/blockx/audit/")
    try:
        assert await audit.fetch() is True and audit.approved == {}
        await _forget_every_token(conns["root"])
        await push_functions(conns["worker"], [("/blockx/audit/" + "c" * 64, b"CR-3")], 3)
        # The read with the forgotten token is refused; a later one authenticates anew
        # (with the old token kept, every read would be refused from now on).
        assert await audit.fetch() is False
        reads = 1
        while not await audit.fetch():
            reads += 1
            assert reads < 20, "the audit allowlist never read again with a new token"
            await asyncio.sleep(0.1)
        assert audit.approved == {"c" * 64: "CR-3"}
    finally:
        await audit.close()


async def test_after_an_etcd_restart_every_authenticated_client_reads_and_registers_again(secured):
    etcd, conns = secured
    conn = conns["worker"]
    fcode = FunctionCodeEtcd(conn, "/blockx/functions/", 60_000)
    publisher = EtcdPublisher(conn, "/blockx/workers/", ADDR, lambda: {"ready": True}, interval_ms=50,
                              backoff_initial_ms=50, backoff_max_ms=300)
    audit = EtcdAuditAllowlist(conn.client(0, timeout=3), "/blockx/audit/")
    try:
        assert await fcode.start(5.0) is True
        await publisher.start()
        await eventually(lambda: _async(publisher.state == PublisherState.REGISTERED), what="registered")
        assert await audit.fetch() is True
        await etcd.astop()
        await etcd.astart()
        rev = await push_functions(conn, [("/blockx/functions/after", b"def main():\n    return 1\n")], 3)
        await eventually(lambda: _async(fcode.current_epoch(0) >= rev), timeout=15,
                         what="the function-code watch reads again after the restart")
        await eventually(lambda: _async(publisher.state == PublisherState.REGISTERED), timeout=15,
                         what="registered again")
        async def registered():
            _r, kvs = await read_prefix(conns["root"], "/blockx/workers/", 3)
            return [k for k, _v, _m in kvs] == [f"/blockx/workers/{ADDR}"]
        await eventually(registered, timeout=15, what="the key back in etcd")
        await push_functions(conn, [("/blockx/audit/" + "b" * 64, b"CR-2")], 3)
        deadline = asyncio.get_running_loop().time() + 10
        while not await audit.fetch():      # the first read may still meet the restarting server
            assert asyncio.get_running_loop().time() < deadline, "the audit allowlist never read again"
            await asyncio.sleep(0.1)
        assert "b" * 64 in audit.approved
    finally:
        await publisher.deregister()
        await fcode.stop()
        await audit.close()
