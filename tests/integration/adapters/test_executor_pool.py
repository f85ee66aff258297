"""PoolManager mechanics with a stand-in child program (restart, backoff, kill,
stop, environment), and the real executors attaching through the adapter."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

from blockx.adapters.executor import ExecutorAdapter, PoolManager, ExecutorSlotState
from blockx.adapters.executor import pool as pool_mod
from blockx.adapters.executor.pool import build_child_env
from blockx.protocol import messages as m

from .fake_executor import RecordingHandler, wait_until

# The stand-in "executor": records its argv/env, then behaves per BLOCKX_EXECUTOR_MODE.
STAND_IN = r"""
import json, os, signal, sys, time
out = os.environ.get("BLOCKX_EXECUTOR_TEST_OUT")
eid = sys.argv[sys.argv.index("--executor-id") + 1]
mode = os.environ.get("BLOCKX_EXECUTOR_MODE", "sleep")
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
# Written last: once a stand-in's record exists, its signal disposition is set.
secret = ""
if "--attach-secret-fd" in sys.argv:
    fd = int(sys.argv[sys.argv.index("--attach-secret-fd") + 1])
    secret = os.read(fd, 4096).decode()
    os.close(fd)
if out:
    with open(os.path.join(out, f"{eid}.{os.getpid()}.json"), "w") as f:
        json.dump({"argv": sys.argv[1:], "env": dict(os.environ), "secret": secret}, f)
if mode.startswith("exit"):
    sys.exit(int(mode[4:] or 0))
time.sleep(60)
"""


@pytest.fixture
def out_dir():
    d = tempfile.mkdtemp(prefix="bxp-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
async def make_pool(out_dir):
    pools: list[PoolManager] = []

    def make(count: int = 1, mode: str = "sleep", **kw) -> PoolManager:
        kw.setdefault("restart_delay_ms", 20)
        pool = PoolManager(count, os.path.join(out_dir, "w.sock"), max_inflight=7, max_runnable=5,
                           command=[sys.executable, "-c", STAND_IN],
                           extra_env={"BLOCKX_EXECUTOR_TEST_OUT": out_dir,
                                      "BLOCKX_EXECUTOR_MODE": mode}, **kw)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        await pool.stop(grace_ms=500)


def records(out_dir: str, executor_id: str) -> list[dict]:
    found = []
    for name in sorted(os.listdir(out_dir)):
        if name.startswith(executor_id + ".") and name.endswith(".json"):
            with open(os.path.join(out_dir, name)) as f:
                try:
                    found.append(json.load(f))
                except json.JSONDecodeError:
                    pass  # still being written
    return found


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_start_spawns_every_slot_with_the_executor_flags(make_pool, out_dir):
    pool = make_pool(2, extra_args=("--log-level", "debug"))
    await pool.start()
    assert pool.states() == {"exec-0": ExecutorSlotState.RUNNING, "exec-1": ExecutorSlotState.RUNNING}
    for i in range(2):
        rec = (await wait_until(lambda: records(out_dir, f"exec-{i}"), what="stand-in record"))[0]
        fd = rec["argv"][rec["argv"].index("--attach-secret-fd") + 1]
        assert rec["argv"] == ["--executor-id", f"exec-{i}", "--socket-path",
                               os.path.join(out_dir, "w.sock"), "--executor-max-inflight", "7",
                               "--executor-max-runnable", "5", "--attach-secret-fd", fd,
                               "--log-level", "debug"]
        # The secret came through the inherited pipe only, and it is the one the
        # adapter expects for that id (once).
        secret = rec["secret"]
        assert len(secret) == 64 and secret not in " ".join(rec["argv"])
        assert all(secret not in v for v in rec["env"].values())
        assert pool.credentials.check(f"exec-{i}", secret) is None
        assert pool.credentials.check(f"exec-{i}", secret) is not None
    assert pool.pid_of("exec-0") and pool.pid_of("exec-0") != pool.pid_of("exec-1")


async def test_children_get_only_allowlisted_environment(make_pool, out_dir, monkeypatch):
    monkeypatch.setenv("WORKER_CONFIG", '{"secret": 1}')
    monkeypatch.setenv("ETCD_ENDPOINTS", "http://127.0.0.1:2379")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "nope")
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.setenv("BLOCKX_EXECUTOR_FLAVOUR", "vanilla")
    pool = make_pool(1)
    await pool.start()
    env = (await wait_until(lambda: records(out_dir, "exec-0"), what="stand-in record"))[0]["env"]
    assert "WORKER_CONFIG" not in env and "ETCD_ENDPOINTS" not in env
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert env["TZ"] == "UTC" and env["BLOCKX_EXECUTOR_FLAVOUR"] == "vanilla"
    assert env["PATH"] == os.environ["PATH"]
    assert env["BLOCKX_EXECUTOR_TEST_OUT"] == out_dir


def test_build_child_env_filters_by_allowlist_and_prefix(monkeypatch):
    environ = {"PATH": "/bin", "HOME": "/root", "SECRET": "x", "BLOCKX_EXECUTOR_A": "1",
               "BLOCKX_OTHER": "2", "PYTHONPATH": "/lib"}
    monkeypatch.setattr(pool_mod, "_executor_source_dir", lambda: None)
    env = build_child_env(("PATH", "PYTHONPATH"), {"EXTRA": "3"}, environ)
    assert env == {"PATH": "/bin", "PYTHONPATH": "/lib", "BLOCKX_EXECUTOR_A": "1", "EXTRA": "3"}
    # blockx_executor not importable as installed: the source tree's executor/ goes first
    monkeypatch.setattr(pool_mod, "_executor_source_dir", lambda: "/src/executor")
    env = build_child_env(("PATH", "PYTHONPATH"), None, environ)
    assert env["PYTHONPATH"] == os.pathsep.join(["/src/executor", "/lib"])


def test_the_project_venv_resolves_blockx_executor_without_help():
    assert pool_mod._executor_source_dir() is None


async def test_exited_executor_restarts_after_the_delay(make_pool, out_dir):
    pool = make_pool(1, mode="exit3", restart_delay_ms=100, max_restarts=100)
    await pool.start()
    await wait_until(lambda: pool.states()["exec-0"] is ExecutorSlotState.WAITING, what="WAITING")
    info = pool.slot_info()[0]
    assert info.last_exit_code == 3 and info.pid is None
    await wait_until(lambda: pool.restarts_total >= 2, what="two restarts")
    assert len(records(out_dir, "exec-0")) >= 2
    assert pool.slot_info()[0].starts >= 3


async def test_too_many_restarts_back_off_then_resume(make_pool):
    pool = make_pool(1, mode="exit1", restart_delay_ms=10, max_restarts=2,
                     restart_window_ms=60_000, backoff_ms=400)
    await pool.start()
    await wait_until(lambda: pool.states()["exec-0"] is ExecutorSlotState.BACKOFF, what="BACKOFF")
    info = pool.slot_info()[0]
    assert info.restarts == 2 and info.backoffs == 1 and info.starts == 3
    await asyncio.sleep(0.2)
    assert pool.states()["exec-0"] is ExecutorSlotState.BACKOFF and pool.restarts_total == 2
    await wait_until(lambda: pool.restarts_total >= 3, what="restart after backoff")
    await wait_until(lambda: pool.slot_info()[0].backoffs == 2, what="second BACKOFF")
    # a fresh window after the backoff: max_restarts restarts again, then BACKOFF
    assert pool.slot_info()[0].restarts == 4


async def test_kill_executor_sigkills_and_the_slot_restarts(make_pool):
    pool = make_pool(2, restart_delay_ms=20)
    await pool.start()
    pid = pool.pid_of("exec-1")
    assert pool.kill_executor("exec-1") is True
    assert pool.kill_executor("exec-9") is False
    await wait_until(lambda: pool.pid_of("exec-1") not in (None, pid), what="respawn")
    info = {i.executor_id: i for i in pool.slot_info()}
    assert info["exec-1"].kills == 1 and info["exec-1"].last_exit_code == -signal.SIGKILL
    assert info["exec-0"].kills == 0 and pool.kills_total == 1
    assert pool.counters.executor_restarts == 1
    assert gone(pid)


async def test_stop_terminates_and_kills_stubborn_children(make_pool, out_dir):
    pool = make_pool(2, mode="stubborn")
    await pool.start()
    pids = [pool.pid_of("exec-0"), pool.pid_of("exec-1")]
    await wait_until(lambda: all(records(out_dir, f"exec-{i}") for i in range(2)),
                     what="both stand-ins to ignore SIGTERM")
    await pool.stop(grace_ms=300)
    assert set(pool.states().values()) == {ExecutorSlotState.STOPPED}
    assert all(gone(p) for p in pids)
    assert [i.last_exit_code for i in pool.slot_info()] == [-signal.SIGKILL] * 2
    await pool.stop()  # idempotent


async def test_stop_is_graceful_for_well_behaved_children(make_pool):
    pool = make_pool(1)
    await pool.start()
    pid = pool.pid_of("exec-0")
    await pool.stop(grace_ms=3000)
    assert pool.slot_info()[0].last_exit_code == -signal.SIGTERM and gone(pid)
    assert pool.states()["exec-0"] is ExecutorSlotState.STOPPED


async def test_restart_disabled_leaves_the_slot_stopped(make_pool):
    pool = make_pool(1, mode="exit0", restart_enabled=False)
    await pool.start()
    await wait_until(lambda: pool.states()["exec-0"] is ExecutorSlotState.STOPPED, what="STOPPED")
    await asyncio.sleep(0.1)
    assert pool.restarts_total == 0


async def test_unstartable_interpreter_backs_off_instead_of_spinning(out_dir):
    pool = PoolManager(1, os.path.join(out_dir, "w.sock"), max_inflight=1, max_runnable=1,
                       python="/nonexistent/python", restart_delay_ms=10, max_restarts=1,
                       backoff_ms=60_000)
    await pool.start()
    try:
        await wait_until(lambda: pool.states()["exec-0"] is ExecutorSlotState.BACKOFF, what="BACKOFF")
        assert pool.slot_info()[0].spawn_failures == 2
    finally:
        await pool.stop()


def test_invalid_configuration_is_rejected():
    with pytest.raises(ValueError, match="max_restarts"):
        PoolManager(1, "/tmp/x.sock", max_inflight=1, max_runnable=1, max_restarts=-1)


async def test_real_executors_attach_through_the_adapter(out_dir):
    sock_path = os.path.join(out_dir, "run", "w.sock")
    adapter = ExecutorAdapter(sock_path)
    handler = adapter.handler = RecordingHandler()
    await adapter.start()
    pool = PoolManager(2, sock_path, max_inflight=16, max_runnable=16, restart_delay_ms=100,
                       credentials=adapter.credentials)
    try:
        await pool.start()
        await wait_until(lambda: sorted(handler.attached) == ["exec-0", "exec-1"], timeout=20,
                         what="both real executors attached")
        snaps = adapter.snapshots()
        assert [s.executor_id for s in snaps] == ["exec-0", "exec-1"]
        for snap in snaps:
            assert snap.healthy and snap.capacity == 16
            assert adapter.pid_of(snap.executor_id) == pool.pid_of(snap.executor_id)

        # one call end to end: ExecuteCall -> CallWaiting(function_code) -> ResumeCall -> CallCompleted
        source = "def main(a, b):\n    return a + b\n"
        digest = hashlib.sha256(source.encode()).hexdigest()
        loop = asyncio.get_running_loop()
        sends = []

        def answer(eid, frames):
            for env, _ in frames:
                if env["messageType"] == m.CALL_WAITING:
                    payload = m.resume_function_code(env["callId"], env["requestId"], source,
                                                     digest)["payload"]
                    sends.append(loop.create_task(adapter.send_resume_call(
                        eid, env["callId"], env["requestId"], payload)))

        handler.hook = answer
        adapter.bind("t1/c-0", "exec-1")
        adapter.send_execute_call("exec-1", "t1/c-0", m.execute_call(
            "t1/c-0", "t1", "add", digest, [2, 3], 1)["payload"])
        await wait_until(lambda: any(e["messageType"] == m.CALL_COMPLETED
                                     for e, _ in handler.frames_of("exec-1")), timeout=10,
                         what="CallCompleted from the real executor")
        done = [e for e, _ in handler.frames_of("exec-1") if e["messageType"] == m.CALL_COMPLETED]
        assert done[0]["payload"]["output"] == 5 and done[0]["payload"]["attemptSeq"] == 1
        assert not adapter.is_bound("t1/c-0", "exec-1")
        await asyncio.gather(*sends)
        pid = pool.pid_of("exec-0")
        adapter.kill_hook = pool.kill_executor  # the wedge backstop's path
        assert adapter.kill_executor("exec-0") is True
        await handler.wait_lost("exec-0")
        await wait_until(lambda: gone(pid), what="killed executor reaped")
        await wait_until(lambda: handler.attached.count("exec-0") == 2, timeout=20,
                         what="exec-0 restarted and re-attached")
    finally:
        await pool.stop(grace_ms=3000)
        await adapter.close()


GRPC_SPAWN = r"""
import asyncio, sys, grpc, uvloop
from blockx.adapters.executor.spawn import ChildProcess

async def main():
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    ChildProcess([sys.executable, "-c", "print('child ran')"], {}, loop=loop,
                 on_exit=lambda child, rc: done.set_result(rc))
    print("exit", await asyncio.wait_for(done, 10))
    await channel.close()
    await server.stop(None)

uvloop.run(main())
"""


async def test_spawning_from_a_grpc_loaded_worker_is_quiet():
    # uvloop's subprocess_exec forks and gRPC logs "skipping fork() handlers";
    # vfork+exec runs no fork handlers, so nothing is logged.
    proc = await asyncio.get_running_loop().run_in_executor(None, functools.partial(
        subprocess.run, [sys.executable, "-c", GRPC_SPAWN], capture_output=True, timeout=30))
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().split() == ["child", "ran", "exit", "0"]
    assert "fork" not in proc.stderr.decode().lower(), proc.stderr.decode()
