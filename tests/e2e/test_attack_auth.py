"""Attacks on the Worker's API, tried as a client on the same network would, against
real worker processes: calls without credentials or with a wrong token, reading
and taking over another identity's task, reflection, and the auth settings
(SIGHUP reload, the generated local token, mTLS identities, an open `none`).
Each fails on a Worker without authentication and task ownership."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from blockx.client import ClientTLS
from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc
from tests.e2e.conftest import make_functions_dir
from tests.support import auth
from tests.support.certs import CertAuthority
from tests.support.session import RawSession, call_list_task, kind, submit
from tests.support.worker import WorkerProcess

pytestmark = pytest.mark.e2e

ALICE, BOB, WRONG = "alice-token-0123456789abcdef", "bob-token-0123456789abcdef", "not-a-token-0123456789abcdef"
SECRET = "alice's secret output"


@pytest.fixture(scope="module")
def w(tmp_path_factory):
    """One worker with three identities: alice, bob and admin (the harness token)."""
    d = tmp_path_factory.mktemp("auth")
    tokens = auth.write_tokens(d, {"alice": ALICE, "bob": BOB, "admin": auth.HARNESS_TOKEN})
    proc = WorkerProcess({"WORKER_AUTH_TOKENS_FILE": tokens, "TASK_SLOTS": "16", "RESULT_RETENTION_MS": "60000"},
                         functions_dir=make_functions_dir(d))
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def stub(w, token):
    ch = auth.channel(f"127.0.0.1:{w.port}", token=token)
    return ch, pb_grpc.WorkerServiceStub(ch)


def rpc_error(fn, *args, **kw) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as ei:
        r = fn(*args, **kw)
        if hasattr(r, "__iter__") and not isinstance(r, (bytes, str)) and not hasattr(r, "DESCRIPTOR"):
            list(r)                     # a server stream: the status comes with the first read
    return ei.value


def session_status(w, token, *requests) -> tuple[grpc.StatusCode, str]:
    async def run():
        s = RawSession(w.port, token=token)
        try:
            await asyncio.wait_for(s.call.initial_metadata(), 10)    # accepted (metadata) or refused (status)
            if requests and not s.call.done():
                await s.send(*requests)
            try:
                while True:
                    await s.next_event(10)
            except (EOFError, grpc.aio.AioRpcError):
                pass
            return await s.status()
        finally:
            await s.close()
    return asyncio.run(run())


def session_events(w, token, *requests, n: int) -> list[pb.SessionEvent]:
    async def run():
        s = RawSession(w.port, token=token)
        try:
            await s.send(*requests)
            return await s.events(n)
        finally:
            await s.close()
    return asyncio.run(run())


def alice_task(w, task_id: str) -> pb.TaskResult:
    ch, st = stub(w, ALICE)
    try:
        st.SubmitTask(pb.SubmitTaskRequest(task=call_list_task(task_id, [("echo", [SECRET])])), timeout=10)
        for upd in st.WatchTasks(pb.WatchTasksRequest(task_ids=[task_id]), timeout=30):
            if upd.is_terminal:
                return upd.result
    finally:
        ch.close()
    raise AssertionError("no terminal update")


# ---- unauthenticated and wrong-token calls -----------------------------------------------------


UNARY = {
    "RequestTaskSlot": lambda st: st.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="u-slot"), timeout=10),
    "SubmitTask": lambda st: st.SubmitTask(pb.SubmitTaskRequest(
        task=call_list_task("u-submit", [("add", [1, 2])])), timeout=10),
    "GetTaskResult": lambda st: st.GetTaskResult(pb.GetTaskResultRequest(task_id="u-result"), timeout=10),
    "WatchTasks": lambda st: list(st.WatchTasks(pb.WatchTasksRequest(task_ids=["u-watch"]), timeout=10)),
    "GetWorkerStatus": lambda st: st.GetWorkerStatus(pb.GetWorkerStatusRequest(), timeout=10),
    "GetTaskTrace": lambda st: st.GetTaskTrace(pb.GetTaskTraceRequest(task_id="u-trace"), timeout=10),
    "CancelTask": lambda st: st.CancelTask(pb.CancelTaskRequest(task_id="u-cancel"), timeout=10),
    "ListTasks": lambda st: st.ListTasks(pb.ListTasksRequest(), timeout=10),
}


@pytest.mark.parametrize("token", [None, WRONG], ids=["no-token", "wrong-token"])
def test_every_rpc_without_valid_credentials_is_unauthenticated(w, token):
    ch, st = stub(w, token)
    try:
        for name, call in UNARY.items():
            err = rpc_error(call, st)
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED, (name, err)
            assert "bearer token" in err.details(), (name, err.details())
        # A malformed authorization value is refused the same way.
        md = (("authorization", f"Basic {ALICE}"),)
        err = rpc_error(pb_grpc.WorkerServiceStub(grpc.insecure_channel(f"127.0.0.1:{w.port}")).GetTaskResult,
                        pb.GetTaskResultRequest(task_id="u"), timeout=10, metadata=md)
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED and "Bearer <token>" in err.details()
    finally:
        ch.close()
    code, details = session_status(w, token, submit(1, "u-session", [("add", [1, 2])]))
    assert code == grpc.StatusCode.UNAUTHENTICATED and "bearer token" in details, (code, details)
    # Nothing was reserved or submitted by any of these calls.
    for tid in ("u-slot", "u-submit", "u-session"):
        assert rpc_error(w.result, tid).code() == grpc.StatusCode.NOT_FOUND
    assert w.stub.GetWorkerStatus(pb.GetWorkerStatusRequest(), timeout=10).slots.reserved == 0


def test_reflection_needs_a_token_and_health_stays_open(w):
    def list_services(token):
        ch = auth.channel(f"127.0.0.1:{w.port}", token=token)
        try:
            resp = reflection_pb2_grpc.ServerReflectionStub(ch).ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
            return [s.name for r in resp for s in r.list_services_response.service]
        finally:
            ch.close()
    for token in (None, WRONG):
        err = rpc_error(list_services, token)
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED, err
    assert "blockx.worker.v1.WorkerService" in list_services(BOB)
    ch = grpc.insecure_channel(f"127.0.0.1:{w.port}")             # a probe carries no credentials
    try:
        for service in ("", "blockx.worker.v1.WorkerService"):
            assert health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service),
                                                       timeout=5).status == health_pb2.HealthCheckResponse.SERVING
    finally:
        ch.close()


# ---- another identity's task ---------------------------------------------------------------------


def test_another_identity_cannot_read_watch_trace_or_take_a_task(w):
    res = alice_task(w, "a-owned")
    assert res.state == pb.TASK_STATE_SUCCEEDED and json.loads(res.outputs[0]) == SECRET
    ch, bob = stub(w, BOB)
    try:
        unknown = rpc_error(bob.GetTaskResult, pb.GetTaskResultRequest(task_id="never-submitted"), timeout=10)
        err = rpc_error(bob.GetTaskResult, pb.GetTaskResultRequest(task_id="a-owned"), timeout=10)
        assert err.code() == grpc.StatusCode.NOT_FOUND
        assert err.details() == unknown.details().replace("never-submitted", "a-owned")   # same as unknown
        err = rpc_error(bob.WatchTasks, pb.WatchTasksRequest(task_ids=["a-owned"]), timeout=10)
        assert err.code() == grpc.StatusCode.NOT_FOUND
        err = rpc_error(bob.GetTaskTrace, pb.GetTaskTraceRequest(task_id="a-owned"), timeout=10)
        assert err.code() == grpc.StatusCode.NOT_FOUND
        # Re-submitting the id (the idempotent answer would be the outputs) and reserving it.
        err = rpc_error(bob.SubmitTask, pb.SubmitTaskRequest(task=call_list_task("a-owned", [("add", [1, 1])])),
                        timeout=10)
        assert err.code() == grpc.StatusCode.ALREADY_EXISTS and SECRET not in err.details()
        err = rpc_error(bob.RequestTaskSlot, pb.RequestTaskSlotRequest(task_id="a-owned"), timeout=10)
        assert err.code() == grpc.StatusCode.ALREADY_EXISTS
        err = rpc_error(bob.GetWorkerStatus, pb.GetWorkerStatusRequest(), timeout=10)
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED and "admin" in err.details()
    finally:
        ch.close()
    # The same on one session: watch, get_result, submit and request_slot of the id.
    evs = session_events(w, BOB,
                         pb.SessionRequest(request_id=1, watch=pb.WatchTasksRequest(task_ids=["a-owned"])),
                         pb.SessionRequest(request_id=2, get_result=pb.GetTaskResultRequest(task_id="a-owned")),
                         submit(3, "a-owned", [("add", [1, 1])]),
                         pb.SessionRequest(request_id=4, request_slot=pb.RequestTaskSlotRequest(task_id="a-owned")),
                         submit(5, "b-own", [("add", [2, 2])], follow=False), n=5)
    by_rid = {e.request_id: e for e in evs}
    codes = {rid: grpc.StatusCode.NOT_FOUND.value[0] if rid <= 2 else grpc.StatusCode.ALREADY_EXISTS.value[0]
             for rid in (1, 2, 3, 4)}
    for rid, code in codes.items():
        assert kind(by_rid[rid]) == "error" and by_rid[rid].error.code == code, by_rid[rid]
    assert kind(by_rid[5]) == "submitted"                  # the session itself lives on
    assert not any(SECRET in e.SerializeToString().decode("utf-8", "replace") for e in evs)
    # Alice still has her task and its outputs.
    ch, alice = stub(w, ALICE)
    try:
        r = alice.GetTaskResult(pb.GetTaskResultRequest(task_id="a-owned"), timeout=10)
        assert json.loads(r.result.outputs[0]) == SECRET
    finally:
        ch.close()


def test_admin_sees_every_task(w):
    alice_task(w, "a-for-admin")
    ch, bob = stub(w, BOB)
    try:                                                   # what bob does not see, admin does
        assert rpc_error(bob.GetTaskResult, pb.GetTaskResultRequest(task_id="a-for-admin"),
                         timeout=10).code() == grpc.StatusCode.NOT_FOUND
        assert rpc_error(bob.GetWorkerStatus, pb.GetWorkerStatusRequest(),
                         timeout=10).code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        ch.close()
    r = w.result("a-for-admin")                            # the harness channel is admin
    assert r.state == pb.TASK_STATE_SUCCEEDED and json.loads(r.result.outputs[0]) == SECRET
    assert w.stub.GetTaskTrace(pb.GetTaskTraceRequest(task_id="a-for-admin"), timeout=10).task_id == "a-for-admin"
    assert w.wait_terminal("a-for-admin").state == pb.TASK_STATE_SUCCEEDED
    assert w.stub.GetWorkerStatus(pb.GetWorkerStatusRequest(), timeout=10).slots.total == 16


def test_every_cli_command_carries_the_token(w):
    addr = f"127.0.0.1:{w.port}"
    env = {k: v for k, v in os.environ.items() if k != "BLOCKX_TOKEN"}

    def cli(*args, token=None, extra_env=None):
        argv = [sys.executable, "-m", "blockx", *args, "--addr", addr, "--compact"]
        if token is not None:
            argv += ["--token", token]
        return subprocess.run(argv, env={**env, "STATE_DIR": w.tmp, **(extra_env or {})},
                              capture_output=True, text=True, timeout=60)
    p = cli("submit", "--task-id", "cli-alice", "--calls", "add:2,3", token=ALICE)
    assert p.returncode == 0 and json.loads(p.stdout)["result"]["outputs"] == [5], p.stderr
    p = cli("submit", "--task-id", "cli-env", "--calls", "add:2,3", extra_env={"BLOCKX_TOKEN": ALICE})
    assert p.returncode == 0, p.stderr
    for args in (("result", "cli-alice"), ("watch", "cli-alice"), ("slot", "cli-alice-2")):
        assert cli(*args, token=ALICE).returncode == 0, args
    for args in (("submit", "--calls", "add:1,1"), ("result", "cli-alice"), ("watch", "cli-alice"),
                 ("slot", "cli-x"), ("status",), ("trace", "cli-alice", "-o", os.path.join(w.tmp, "t.json"))):
        for token in (None, WRONG):
            p = cli(*args, token=token)
            assert p.returncode == 1 and "UNAUTHENTICATED" in p.stderr, (args, token, p.stderr)
    p = cli("result", "cli-alice", token=BOB)
    assert p.returncode == 1 and "error: NOT_FOUND" in p.stderr, p.stderr
    p = cli("trace", "cli-alice", "-o", os.path.join(w.tmp, "t.json"), token=ALICE)
    assert p.returncode == 0, p.stderr
    p = cli("status", token=auth.HARNESS_TOKEN)
    assert p.returncode == 0, p.stderr


# ---- the auth settings ---------------------------------------------------------------------------


def test_sighup_reloads_the_tokens_file(start_worker, tmp_path):
    tokens = auth.write_tokens(tmp_path, {"alice": ALICE, "bob": BOB})
    wk = start_worker({"WORKER_AUTH_TOKENS_FILE": tokens})
    carol = "carol-token-0123456789abcdef"

    def status_of(token):
        ch, st = stub(wk, token)
        try:
            return st.GetTaskResult(pb.GetTaskResultRequest(task_id="nope"), timeout=10)
        except grpc.RpcError as err:
            return err.code()
        finally:
            ch.close()
    assert status_of(BOB) == grpc.StatusCode.NOT_FOUND and status_of(carol) == grpc.StatusCode.UNAUTHENTICATED
    auth.write_tokens(tmp_path, {"alice": ALICE, "carol": carol})
    wk.signal(signal.SIGHUP)
    wk.wait_event("auth_tokens_reloaded", 10)
    assert status_of(carol) == grpc.StatusCode.NOT_FOUND           # added
    assert status_of(BOB) == grpc.StatusCode.UNAUTHENTICATED       # removed
    assert status_of(ALICE) == grpc.StatusCode.NOT_FOUND
    # A broken file keeps the tokens in use.
    with open(tokens, "a") as f:
        f.write("dave short\n")
    wk.signal(signal.SIGHUP)
    wk.wait_event("auth_tokens_reload_failed", 10)
    assert status_of(carol) == grpc.StatusCode.NOT_FOUND


def test_the_generated_token_is_0600_and_the_cli_and_client_find_it(start_worker, tmp_path):
    state = tmp_path / "state"
    wk = start_worker({"WORKER_AUTH_MODE": "token", "STATE_DIR": str(state)}, ready=True)
    path = state / "auth-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    name, token = path.read_text().split()
    assert name == "admin" and len(token) >= 32
    assert wk.find_event("worker_serving")["auth_tokens"] == str(path)
    env = {k: v for k, v in os.environ.items() if k != "BLOCKX_TOKEN"}
    addr = f"127.0.0.1:{wk.port}"
    p = subprocess.run([sys.executable, "-m", "blockx", "submit", "--addr", addr, "--compact", "--calls", "add:1,2"],
                       env={**env, "STATE_DIR": str(state)}, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and json.loads(p.stdout)["result"]["outputs"] == [3], p.stderr
    p = subprocess.run([sys.executable, "-m", "blockx", "status", "--addr", addr],
                       env={**env, "STATE_DIR": str(state)}, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr                              # the local token is admin
    code = ("from blockx.client import connect\n"
            f"with connect({addr!r}) as c: print(c.submit(calls=[('add', [4, 5])]).outputs)\n")
    p = subprocess.run([sys.executable, "-c", code], env={**env, "STATE_DIR": str(state)},
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "[9]", p.stderr
    # Elsewhere (another state dir, no BLOCKX_TOKEN) there is no token to find.
    p = subprocess.run([sys.executable, "-m", "blockx", "result", "x", "--addr", addr],
                       env={**env, "STATE_DIR": str(tmp_path / "elsewhere")}, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1 and "UNAUTHENTICATED" in p.stderr, p.stderr
    # A restart reuses the token: clients holding it keep working.
    wk.stop()
    wk2 = start_worker({"WORKER_AUTH_MODE": "token", "STATE_DIR": str(state)})
    assert path.read_text().split()[1] == token
    ch, st = stub(wk2, token)
    try:
        assert st.GetWorkerStatus(pb.GetWorkerStatusRequest(), timeout=10).slots.total > 0
    finally:
        ch.close()


def test_mtls_identity_is_the_certificate_subject(start_worker, tmp_path):
    ca = CertAuthority(tmp_path / "pki")
    server = ca.issue("server")
    certs = {who: ca.issue(who, server=False) for who in ("alice", "bob", "admin")}
    tls = {who: ClientTLS(ca=ca.cert, cert=c.cert, key=c.key) for who, c in certs.items()}
    env = {"WORKER_AUTH_MODE": "mtls", "WORKER_TLS_CERT": server.cert, "WORKER_TLS_KEY": server.key,
           "WORKER_TLS_CLIENT_CA": ca.cert, "WORKER_AUTH_MTLS_ADMINS": "CN=admin"}
    wk = start_worker(env, tls=tls["admin"])
    addr = f"127.0.0.1:{wk.port}"

    def ch(who):
        c = auth.channel(addr, tls[who], token=None)
        return c, pb_grpc.WorkerServiceStub(c)
    ca_, alice = ch("alice")
    cb, bob = ch("bob")
    try:
        alice.SubmitTask(pb.SubmitTaskRequest(task=call_list_task("m-alice", [("echo", [SECRET])])), timeout=10)
        assert wk.wait_terminal("m-alice").state == pb.TASK_STATE_SUCCEEDED      # admin (CN=admin) sees it
        r = alice.GetTaskResult(pb.GetTaskResultRequest(task_id="m-alice"), timeout=10)
        assert json.loads(r.result.outputs[0]) == SECRET
        assert rpc_error(bob.GetTaskResult, pb.GetTaskResultRequest(task_id="m-alice"),
                         timeout=10).code() == grpc.StatusCode.NOT_FOUND
        err = rpc_error(bob.SubmitTask, pb.SubmitTaskRequest(task=call_list_task("m-alice", [("add", [1, 1])])),
                        timeout=10)
        assert err.code() == grpc.StatusCode.ALREADY_EXISTS and SECRET not in err.details()
        assert rpc_error(bob.GetWorkerStatus, pb.GetWorkerStatusRequest(),
                         timeout=10).code() == grpc.StatusCode.PERMISSION_DENIED
        assert wk.stub.GetWorkerStatus(pb.GetWorkerStatusRequest(), timeout=10).slots.total > 0
    finally:
        ca_.close()
        cb.close()


def test_mtls_identity_is_one_cn_or_one_san_and_admin_only_by_the_mapping(start_worker, tmp_path):
    ca = CertAuthority(tmp_path / "pki")
    server = ca.issue("server")
    made = {
        "admin": dict(subject="/CN=admin"),                          # named in WORKER_AUTH_MTLS_ADMINS
        "two-cns": dict(subject="/CN=admin/CN=alice"),               # ambiguous: refused
        "multi-valued": dict(subject="/CN=alice+CN=admin"),          # the same in one RDN
        "tenant": dict(subject="/O=tenant-42/CN=admin"),             # CN admin, but another subject
        "escaped": dict(subject="/CN=bob\\,CN=admin"),              # one CN whose value holds ",CN=admin"
        "spiffe": dict(subject="/O=acme", san="URI:spiffe://acme/ops"),
        "two-sans": dict(subject="/O=acme", san="DNS:a.acme,DNS:b.acme"),
    }
    tls = {who: ClientTLS(ca=ca.cert, cert=c.cert, key=c.key)
           for who, c in ((who, ca.issue(who, server=False, **kw)) for who, kw in made.items())}
    env = {"WORKER_AUTH_MODE": "mtls", "WORKER_TLS_CERT": server.cert, "WORKER_TLS_KEY": server.key,
           "WORKER_TLS_CLIENT_CA": ca.cert, "WORKER_AUTH_MTLS_ADMINS": "CN=admin; URI:spiffe://acme/ops"}
    wk = start_worker(env, tls=tls["admin"])
    addr = f"127.0.0.1:{wk.port}"

    def status(who):
        c = auth.channel(addr, tls[who], token=None)
        try:
            pb_grpc.WorkerServiceStub(c).GetWorkerStatus(pb.GetWorkerStatusRequest(), timeout=10)
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as exc:
            return exc.code(), exc.details()
        finally:
            c.close()
    for who in ("two-cns", "multi-valued"):
        code, details = status(who)
        assert code == grpc.StatusCode.UNAUTHENTICATED and "2 common names" in details, (who, code, details)
    for who in ("tenant", "escaped"):                            # identities of their own, not admin
        code, details = status(who)
        assert code == grpc.StatusCode.PERMISSION_DENIED, (who, code, details)
    code, details = status("two-sans")
    assert code == grpc.StatusCode.UNAUTHENTICATED and "2 subject alternative names" in details, details
    assert status("admin")[0] == grpc.StatusCode.OK
    assert status("spiffe")[0] == grpc.StatusCode.OK            # a SAN identity, admin by the mapping
    # The tenant's CN=admin is its own identity: its task is not the real admin's, nor the other way.
    c = auth.channel(addr, tls["tenant"], token=None)
    try:
        st = pb_grpc.WorkerServiceStub(c)
        st.SubmitTask(pb.SubmitTaskRequest(task=call_list_task("m-tenant", [("add", [1, 2])])), timeout=10)
        assert wk.wait_terminal("m-tenant").state == pb.TASK_STATE_SUCCEEDED        # the real admin sees it
        wk.submit_calls("m-admin", [("add", [2, 2])])
        assert rpc_error(st.GetTaskResult, pb.GetTaskResultRequest(task_id="m-admin"),
                         timeout=10).code() == grpc.StatusCode.NOT_FOUND
    finally:
        c.close()


def test_mtls_without_a_client_ca_does_not_start(tmp_path):
    wk = WorkerProcess({"WORKER_AUTH_MODE": "mtls"})
    p = subprocess.run([sys.executable, "-m", "blockx", "serve"], env={**wk.env, "BLOCKX_PROFILE": "block"},
                       capture_output=True, text=True, timeout=60, cwd=wk.tmp)
    assert p.returncode == 2 and "authMode (WORKER_AUTH_MODE) is mtls but tlsClientCa" in p.stderr, p.stderr


def test_none_warns_on_a_non_loopback_listener(start_worker):
    open_w = start_worker({"WORKER_AUTH_MODE": "none", "WORKER_LISTEN": "0.0.0.0:0"}, executors=1)
    ev = open_w.wait_event("auth_disabled", 10)
    assert ev["level"] in ("WARNING", "warning") and "anyone who can reach this port" in ev["warning"], ev
    assert open_w.find_event("worker_serving")["auth"] == "none"
    # `none` serves without credentials; on loopback it does not warn.
    ch = grpc.insecure_channel(f"127.0.0.1:{open_w.port}")
    try:
        st = pb_grpc.WorkerServiceStub(ch)
        st.SubmitTask(pb.SubmitTaskRequest(task=call_list_task("n-1", [("add", [1, 1])])), timeout=10)
    finally:
        ch.close()
    local = start_worker({"WORKER_AUTH_MODE": "none"}, executors=1)
    time.sleep(0.5)
    assert local.find_event("auth_disabled") is None


PLANTED = "planted-token-0123456789abcdef"


def _planted_state(tmp_path, how: str):
    """A STATE_DIR where another local user could put the generated token's file:
    the directory writable by others, or an auth-token that is another user's file
    or a symbolic link to one."""
    state = tmp_path / f"state-{how}"
    state.mkdir()
    theirs = tmp_path / f"theirs-{how}"
    theirs.write_text(f"admin {PLANTED}\n")
    os.chown(theirs, 65534, 65534)
    if how == "dir-writable":
        os.chmod(state, 0o777)
        (state / "auth-token").write_text(f"admin {PLANTED}\n")
    elif how == "other-owner":
        os.chmod(state, 0o700)
        (state / "auth-token").write_text(f"admin {PLANTED}\n")
        os.chown(state / "auth-token", 65534, 65534)
    else:
        os.chmod(state, 0o700)
        os.symlink(theirs, state / "auth-token")
    return state


@pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's file needs root")
@pytest.mark.parametrize("how", ["dir-writable", "other-owner", "symlink"])
def test_a_token_file_another_user_could_plant_is_never_trusted(tmp_path, how):
    # Without a tokens file the Worker trusts <STATE_DIR>/auth-token as admin: if
    # another local user can write it (a directory open to writes, their own file,
    # a link to their file), their token would be admin. Such a Worker does not start.
    state = _planted_state(tmp_path, how)
    wk = WorkerProcess({"WORKER_AUTH_MODE": "token", "STATE_DIR": str(state)}, executors=1)
    p = subprocess.Popen([sys.executable, "-m", "blockx", "serve"], env={**wk.env, "BLOCKX_PROFILE": "block"},
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=wk.tmp)
    try:
        _out, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:        # it started: does it take the planted token as admin?
        p.kill()
        _out, err = p.communicate()
        raise AssertionError(f"a worker started on a planted token file ({how}): {err[-600:]}")
    assert p.returncode == 2, (p.returncode, err[-600:])
    assert "auth-token" in err and "WORKER_AUTH_TOKENS_FILE" in err and PLANTED not in err, err[-600:]


def test_tokens_sent_in_clear_over_a_network_listener_are_warned_of(start_worker, tmp_path):
    # The default listener is every address without TLS: a bearer token then
    # crosses the network readable by anyone on the path, who becomes that identity.
    wk = start_worker({"WORKER_LISTEN": "0.0.0.0:0"}, executors=1)
    ev = wk.wait_event("auth_token_cleartext", 10)
    assert ev["level"] in ("WARNING", "warning") and "WORKER_TLS_CERT" in ev["warning"], ev
    assert wk.find_event("worker_serving")["auth"] == "token"
    local = start_worker({}, executors=1)                    # loopback: nothing to warn of
    local.wait_event("worker_serving", 10)
    time.sleep(0.5)
    assert local.find_event("auth_token_cleartext") is None


def test_a_task_id_under_another_identitys_id_never_writes_into_its_trace(start_worker, tmp_path):
    # Task ids may hold "/": bob's task "<alice's id>/0" has calls "<alice's id>/0/0".
    # Its retries must land in bob's trace, never in alice's, where alice would
    # read bob's call ids and timings.
    tokens = auth.write_tokens(tmp_path, {"alice": ALICE, "bob": BOB, "admin": auth.HARNESS_TOKEN})
    wk = start_worker({"WORKER_AUTH_TOKENS_FILE": tokens, "TRACE_ENABLED": "true"}, executors=1)
    ch_a, alice = stub(wk, ALICE)
    ch_b, bob = stub(wk, BOB)
    try:
        alice.SubmitTask(pb.SubmitTaskRequest(task=call_list_task("tr", [("add", [1, 2])])), timeout=10)
        assert wk.wait_terminal("tr").state == pb.TASK_STATE_SUCCEEDED
        marker = f"/tmp/blockx-flaky-{os.getpid()}-{time.monotonic_ns()}"
        bob.SubmitTask(pb.SubmitTaskRequest(task=call_list_task(
            "tr/0", [("flaky", [marker, 2])],
            call_retry_policy=pb.CallRetryPolicy(max_attempts=3, base_backoff_ms=5))), timeout=10)
        assert wk.wait_terminal("tr/0").state == pb.TASK_STATE_SUCCEEDED
        mine = alice.GetTaskTrace(pb.GetTaskTraceRequest(task_id="tr"), timeout=10).chrome_trace_json
        theirs = bob.GetTaskTrace(pb.GetTaskTraceRequest(task_id="tr/0"), timeout=10).chrome_trace_json
        assert b"tr/0/0" in theirs                      # bob's retries are recorded, in bob's trace
        assert b"tr/0/0" not in mine, "bob's call landed in alice's trace"
    finally:
        ch_a.close()
        ch_b.close()
        if os.path.exists(marker):
            os.unlink(marker)


def test_the_local_admin_token_never_leaves_for_a_non_loopback_address(start_worker, tmp_path):
    # The generated token is admin: a CLI or client on the worker's host that is
    # pointed at another address (a typo, a fleet entry in etcd, a shadow target)
    # must not hand it over. The "other address" here is a target the client cannot
    # prove is this host (a DNS name through grpc's dns resolver), which this very
    # worker answers on loopback, so the test sees what arrived (no credentials)
    # and no packet leaves the host.
    state = tmp_path / "state"
    wk = start_worker({"WORKER_AUTH_MODE": "token", "STATE_DIR": str(state)}, executors=1)
    other = f"dns:///localhost:{wk.port}"
    env = {k: v for k, v in os.environ.items() if k != "BLOCKX_TOKEN"}

    def status(addr, **extra):
        return subprocess.run([sys.executable, "-m", "blockx", "status", "--addr", addr],
                              env={**env, "STATE_DIR": str(state), **extra}, capture_output=True, text=True,
                              timeout=60)
    assert status(f"127.0.0.1:{wk.port}").returncode == 0                # on loopback: found by itself
    p = status(other)
    assert p.returncode == 1 and "UNAUTHENTICATED" in p.stderr, (p.returncode, p.stderr[-400:])
    token = (state / "auth-token").read_text().split()[1]                 # given on purpose, it goes
    assert status(other, BLOCKX_TOKEN=token).returncode == 0
    code = ("from blockx.client import connect\n"
            f"with connect('{other}') as c: c.submit(calls=[('add', [4, 5])])\n")
    p = subprocess.run([sys.executable, "-c", code], env={**env, "STATE_DIR": str(state)},
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "UNAUTHENTICATED" in p.stderr, p.stderr[-400:]


def test_another_identitys_task_is_not_found_on_every_rpc_and_session_op_as_an_unknown_id(start_worker, tmp_path):
    """No answer tells bob that alice's ids exist: each RPC and session operation on
    her task (finished, or a bare reservation) answers what an id never used answers."""
    tokens = auth.write_tokens(tmp_path, {"alice": ALICE, "bob": BOB, "admin": auth.HARNESS_TOKEN})
    wk = start_worker({"WORKER_AUTH_TOKENS_FILE": tokens, "TRACE_ENABLED": "true"}, executors=1)
    alice_task(wk, "a-done")
    ch_a, alice = stub(wk, ALICE)
    ch_b, bob = stub(wk, BOB)
    try:
        alice.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="a-held", ttl_ms=60_000), timeout=10)
        rpcs = {
            "GetTaskResult": lambda tid: bob.GetTaskResult(pb.GetTaskResultRequest(task_id=tid), timeout=10),
            "WatchTasks": lambda tid: bob.WatchTasks(pb.WatchTasksRequest(task_ids=[tid]), timeout=10),
            "CancelTask": lambda tid: bob.CancelTask(pb.CancelTaskRequest(task_id=tid, reason="x"), timeout=10),
            "GetTaskTrace": lambda tid: bob.GetTaskTrace(pb.GetTaskTraceRequest(task_id=tid), timeout=10),
        }
        for name, call in rpcs.items():
            unknown = rpc_error(call, "never-used")
            assert unknown.code() == grpc.StatusCode.NOT_FOUND, (name, unknown)
            for tid in ("a-done", "a-held"):
                err = rpc_error(call, tid)
                assert (err.code(), err.details()) == (unknown.code(), unknown.details().replace("never-used", tid)), \
                    (name, tid, err.code(), err.details())
        listed = {t.task_id for t in bob.ListTasks(pb.ListTasksRequest(), timeout=10).tasks}
        assert not listed & {"a-done", "a-held"}, listed
        # The same on one session.
        ops = {
            "get_result": lambda rid, tid: pb.SessionRequest(request_id=rid,
                                                             get_result=pb.GetTaskResultRequest(task_id=tid)),
            "watch": lambda rid, tid: pb.SessionRequest(request_id=rid, watch=pb.WatchTasksRequest(task_ids=[tid])),
            "cancel": lambda rid, tid: pb.SessionRequest(request_id=rid, cancel=pb.CancelTaskRequest(task_id=tid)),
        }
        requests, asked = [], {}
        for op, make in ops.items():
            for tid in ("never-used", "a-done", "a-held"):
                rid = len(requests) + 1
                requests.append(make(rid, tid))
                asked[rid] = (op, tid)
        by_rid = {e.request_id: e for e in session_events(wk, BOB, *requests, n=len(requests))}
        for rid, (op, tid) in asked.items():
            ev = by_rid[rid]
            assert kind(ev) == "error" and ev.error.code == grpc.StatusCode.NOT_FOUND.value[0], (op, tid, ev)
            unknown = next(by_rid[r] for r, (o, t) in asked.items() if o == op and t == "never-used")
            assert ev.error.message == unknown.error.message.replace("never-used", tid), (op, tid, ev)
        # Alice's tasks are untouched: her reservation still stands, her result is hers.
        assert alice.GetTaskResult(pb.GetTaskResultRequest(task_id="a-held"), timeout=10).state == \
            pb.TASK_STATE_ALLOCATED
        assert json.loads(alice.GetTaskResult(pb.GetTaskResultRequest(task_id="a-done"),
                                              timeout=10).result.outputs[0]) == SECRET
    finally:
        ch_a.close()
        ch_b.close()
