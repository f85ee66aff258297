"""TLS and mutual TLS on the gRPC port, with real certificates made
by openssl in the test and a real worker process."""
import asyncio
import shutil
import signal
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from blockx.cli import main as cli_main
from blockx.client import ClientTLS, WorkerClient, connect
from blockx.worker.v1 import worker_pb2 as pb
from tests.support.certs import CertAuthority


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca, other = CertAuthority(d, "ca"), CertAuthority(d, "other-ca")
    return {"ca": ca, "other": other, "server": ca.issue("server"), "client": ca.issue("client", server=False),
            "stranger": other.issue("stranger", server=False), "server2": other.issue("server2")}


def _health(addr, creds=None, timeout=3):
    ch = grpc.insecure_channel(addr) if creds is None else grpc.secure_channel(addr, creds)
    try:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=timeout).status
    finally:
        ch.close()


def _refused(addr, creds=None):
    with pytest.raises(grpc.RpcError) as ei:
        _health(addr, creds)
    assert ei.value.code() == grpc.StatusCode.UNAVAILABLE, ei.value
    return ei.value


def test_tls_port_refuses_plaintext_and_a_wrong_ca_and_serves_every_rpc(start_worker, pki, capsys):
    server, ca = pki["server"], pki["ca"]
    tls = ClientTLS(ca=ca.cert)
    w = start_worker({"WORKER_TLS_CERT": server.cert, "WORKER_TLS_KEY": server.key}, tls=tls)
    assert w.find_event("worker_serving")["tls"] == "on"
    addr = f"127.0.0.1:{w.port}"
    _refused(addr)                                                          # plaintext
    _refused(addr, ClientTLS(ca=pki["other"].cert).credentials())           # a CA that did not sign it
    assert _health(addr, tls.credentials()) == health_pb2.HealthCheckResponse.SERVING
    # Unary RPCs and WatchTasks (the harness's channel is TLS).
    assert w.submit_calls("t-unary", [("add", [1, 2])]).task_id == "t-unary"
    assert [int(o) for o in w.wait_terminal("t-unary").outputs] == [3]
    assert w.result("t-unary").state == pb.TASK_STATE_SUCCEEDED
    # Sessions through blockx.client, and the CLI's --tls-ca.
    with connect(addr, tls=tls) as c:
        assert c.submit(calls=[("add", [2, 3])]).outputs == [5]
    assert cli_main(["submit", "--addr", addr, "--tls-ca", ca.cert, "--compact", "--calls", "add:4,5"]) == 0
    assert '"outputs":[9]' in capsys.readouterr().out
    assert cli_main(["submit", "--addr", addr, "--rpc-timeout", "2", "--calls", "add:4,5"]) == 1
    assert "error: UNAVAILABLE" in capsys.readouterr().err


def test_mutual_tls_refuses_clients_without_a_certificate_it_trusts(start_worker, pki):
    server, ca, client = pki["server"], pki["ca"], pki["client"]
    good = ClientTLS(ca=ca.cert, cert=client.cert, key=client.key)
    w = start_worker({"WORKER_TLS_CERT": server.cert, "WORKER_TLS_KEY": server.key,
                      "WORKER_TLS_CLIENT_CA": ca.cert}, tls=good)
    assert w.find_event("worker_serving")["tls"] == "mutual"
    addr = f"127.0.0.1:{w.port}"
    _refused(addr, ClientTLS(ca=ca.cert).credentials())                     # no client certificate
    stranger = pki["stranger"]
    _refused(addr, ClientTLS(ca=ca.cert, cert=stranger.cert, key=stranger.key).credentials())
    _refused(addr)
    w.submit_calls("t-m", [("add", [1, 1])])
    assert [int(o) for o in w.wait_terminal("t-m").outputs] == [2]

    async def session():
        async with WorkerClient(addr, tls=good) as c:
            return (await c.submit(calls=[("add", [3, 3])])).outputs
    assert asyncio.run(session()) == [6]


def test_sighup_reloads_the_certificate_without_dropping_a_running_task(start_worker, pki, tmp_path):
    ca, other = pki["ca"], pki["other"]
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    shutil.copy(pki["server"].cert, cert)
    shutil.copy(pki["server"].key, key)
    old, new = ClientTLS(ca=ca.cert), ClientTLS(ca=other.cert)
    w = start_worker({"WORKER_TLS_CERT": str(cert), "WORKER_TLS_KEY": str(key)}, tls=old)
    addr = f"127.0.0.1:{w.port}"
    _refused(addr, new.credentials())
    w.submit_calls("t-long", [("sleep_ms", [1500])])
    watch = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["t-long"]), timeout=20)
    assert next(watch).state in (pb.TASK_STATE_ALLOCATED, pb.TASK_STATE_RUNNING)
    # Rotate to a certificate from another CA, and tell the worker.
    shutil.copy(pki["server2"].cert, cert)
    shutil.copy(pki["server2"].key, key)
    w.signal(signal.SIGHUP)
    w.wait_event("tls_reloaded", 10)
    assert _health(addr, new.credentials()) == health_pb2.HealthCheckResponse.SERVING
    _refused(addr, old.credentials())                                       # new connections see the new cert
    # The running task and its watch on the old connection were not dropped.
    last = [u for u in watch][-1]
    assert last.is_terminal and last.result.state == pb.TASK_STATE_SUCCEEDED, last
    assert [int(o) for o in last.result.outputs] == [1500]
    # A broken file on a later SIGHUP keeps the current certificate.
    key.write_text("not a key")
    w.signal(signal.SIGHUP)
    w.wait_event("tls_reload_failed", 10)
    assert _health(addr, new.credentials()) == health_pb2.HealthCheckResponse.SERVING


def test_shadow_copies_reach_a_mutual_tls_target(start_worker, pki):
    server, ca, client = pki["server"], pki["ca"], pki["client"]
    tls = ClientTLS(ca=ca.cert, cert=client.cert, key=client.key)
    target = start_worker({"WORKER_TLS_CERT": server.cert, "WORKER_TLS_KEY": server.key,
                           "WORKER_TLS_CLIENT_CA": ca.cert}, tls=tls, executors=1)
    primary = start_worker({"SHADOW_SUBMIT_TARGET_ADDR": f"127.0.0.1:{target.port}",
                            "SHADOW_SUBMIT_SAMPLE_RATE": "1.0", "SHADOW_TLS_CA": ca.cert,
                            "SHADOW_TLS_CERT": client.cert, "SHADOW_TLS_KEY": client.key}, executors=1)
    primary.submit_calls("t-shadow-tls", [("add", [20, 22])])
    assert [int(o) for o in primary.wait_terminal("t-shadow-tls").outputs] == [42]
    got = None
    for _ in range(200):
        try:
            got = target.result("t-shadow-tls")
            if got.state == pb.TASK_STATE_SUCCEEDED:
                break
        except grpc.RpcError as err:
            assert err.code() == grpc.StatusCode.NOT_FOUND
        time.sleep(0.05)
    assert got is not None and got.state == pb.TASK_STATE_SUCCEEDED, "the shadow copy never reached the target"
