"""The executor as a process: attach, heartbeats, capacity, exit paths."""

import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

from blockx.protocol import messages as m

from . import functions as fn
from .fake_worker import TIMEOUT, codec, digest_of, executor_env


def test_first_heartbeat_attaches(make_worker):
    w = make_worker({}, max_inflight=5)
    hb = w.wait_heartbeat(lambda hb: True)
    assert hb["executorId"] == "exec-1" and hb["pid"] == w.proc.pid and hb["seq"] == 1
    assert hb["inflightCount"] == 0 and hb["runnableCount"] == 0
    assert hb["availableContexts"] == 5 and hb["maxInflight"] == 5
    assert hb["memoryBytes"] > 1_000_000 and hb["runningCallId"] == ""
    assert hb["cpuUserMs"] > 0  # starting Python and importing the executor takes CPU
    assert abs(hb["sentAtMs"] - time.time() * 1000) < 60_000
    later = w.wait_heartbeat(lambda hb: hb["seq"] >= 3)
    assert later["lastSchedulerActiveAtMs"] >= hb["lastSchedulerActiveAtMs"]
    assert later["cpuUserMs"] >= hb["cpuUserMs"] and later["cpuSystemMs"] >= hb["cpuSystemMs"]
    w.send(m.heartbeat_ack())  # accepted and ignored
    w.wait_heartbeat(lambda hb: hb["seq"] >= 5)


def test_spinning_call_keeps_heartbeating_while_scheduler_stalls(make_worker):
    w = make_worker({"spin": fn.SPIN}, heartbeat_ms=50)
    w.execute("spinner", "spin", [1500])
    first = w.wait_heartbeat(lambda hb: hb["runningCallId"] == "spinner")
    stalled = [first]
    while len(stalled) < 5:
        hb = w.wait_heartbeat(lambda hb: hb["seq"] > stalled[-1]["seq"])
        if hb["runningCallId"] != "spinner":
            break
        stalled.append(hb)
    assert len(stalled) >= 5, stalled  # heartbeats kept coming during the spin
    assert {hb["lastSchedulerActiveAtMs"] for hb in stalled} == {
        first["lastSchedulerActiveAtMs"]}
    assert stalled[-1]["sentAtMs"] > first["lastSchedulerActiveAtMs"]
    assert w.expect(m.CALL_COMPLETED, "spinner")[0]["payload"]["output"] == "spun"
    after = w.wait_heartbeat(lambda hb: hb["runningCallId"] == "" and hb["seq"] > stalled[-1]["seq"])
    assert after["lastSchedulerActiveAtMs"] > first["lastSchedulerActiveAtMs"]


def test_max_inflight_queues_extra_calls_as_runnable(make_worker):
    w = make_worker({"io": fn.IO_JSON}, max_inflight=2)
    for i in range(4):
        w.execute(f"c{i}", "io", [i])
    waits = {}
    for _ in range(2):
        env, _ = w.expect(m.CALL_WAITING)
        waits[env["callId"]] = env
    assert set(waits) == {"c0", "c1"}
    w.no_frame(0.2)
    hb = w.wait_heartbeat(lambda hb: hb["inflightCount"] == 2 and hb["runnableCount"] == 2)
    assert hb["availableContexts"] == 0
    w.send(m.resume_call_result("c0", waits["c0"]["requestId"], "io", 0))
    assert w.expect(m.CALL_COMPLETED, "c0")[0]["payload"]["output"] == {"got": 0}
    env, _ = w.expect(m.CALL_WAITING, "c2")  # c0's context went to the next queued call
    w.no_frame(0.2)
    w.wait_heartbeat(lambda hb: hb["inflightCount"] == 2 and hb["runnableCount"] == 1)


def test_subcall_child_runs_beyond_max_inflight(make_worker):
    w = make_worker({"sub": fn.SUBCALL, "add": fn.ADD}, max_inflight=1)
    w.execute("root", "sub", [1])
    env, _ = w.expect(m.CALL_WAITING, "root")
    w.execute("root/sub-1", "add", [1, 1], parent="root")
    assert w.expect(m.CALL_COMPLETED, "root/sub-1")[0]["payload"]["output"] == 2
    w.send(m.resume_call_result("root", env["requestId"], "subcall", 2))
    assert w.expect(m.CALL_COMPLETED, "root")[0]["payload"]["output"] == 20


def test_exits_cleanly_when_the_worker_closes_the_socket(make_worker):
    w = make_worker({"io": fn.IO_JSON})
    w.wait_heartbeat(lambda hb: True)
    w.execute("c1", "io", [1])  # a waiting call is abandoned, not an error
    w.expect(m.CALL_WAITING, "c1")
    w.close_socket()
    assert w.wait_exit() == 0
    assert "worker closed the socket" in w.stderr()


def test_malformed_frame_exits_non_zero(make_worker):
    w = make_worker({})
    w.wait_heartbeat(lambda hb: True)
    w.send_raw(struct.pack(">I", 5) + b"nope!")
    assert w.wait_exit() == 2
    assert "malformed frame" in w.stderr() and "BadMagic" in w.stderr()


def test_oversized_frame_length_exits_non_zero(make_worker):
    w = make_worker({})
    w.send_raw(struct.pack(">I", 17 * 1024 * 1024))
    assert w.wait_exit() == 2
    assert "FrameTooLarge" in w.stderr()


def test_contract_violation_exits_non_zero(make_worker):
    w = make_worker({})
    env = m.execute_call("c1", "t", "add", "ab" * 32, [1], 1)
    del env["payload"]["args"]
    w.send(env)
    assert w.wait_exit() == 2
    assert "breaks the UDS contract" in w.stderr() and "args" in w.stderr()


def test_cannot_connect_exits_with_a_clear_message():
    with tempfile.TemporaryDirectory(prefix="bx-exec-", dir="/tmp") as d:
        path = os.path.join(d, "absent.sock")
        proc = subprocess.run(
            [sys.executable, "-m", "blockx_executor", "--executor-id", "exec-9",
             "--socket-path", path, "--executor-max-inflight", "4",
             "--executor-max-runnable", "4", "--connect-timeout-ms", "100"],
            env=executor_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 1
    assert "cannot connect to the worker socket" in proc.stderr and path in proc.stderr


def test_connect_retries_until_the_socket_appears():
    with tempfile.TemporaryDirectory(prefix="bx-exec-", dir="/tmp") as d:
        path = os.path.join(d, "late.sock")
        proc = subprocess.Popen(
            [sys.executable, "-m", "blockx_executor", "--executor-id", "exec-2",
             "--socket-path", path, "--connect-timeout-ms", "5000"],
            env=executor_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            time.sleep(0.3)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            listener.listen(1)
            listener.settimeout(TIMEOUT)
            conn, _ = listener.accept()
            conn.settimeout(TIMEOUT)
            decoder = codec.FrameDecoder()
            frames = []
            while not frames:
                frames = decoder.feed(conn.recv(65536))
            assert frames[0][0]["messageType"] == "Heartbeat"
            assert frames[0][0]["payload"]["executorId"] == "exec-2"
            conn.close()
            assert proc.wait(timeout=TIMEOUT) == 0
            listener.close()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stderr.close()


def test_bad_flags_are_rejected():
    proc = subprocess.run(
        [sys.executable, "-m", "blockx_executor", "--executor-id", "e", "--socket-path", "/x",
         "--executor-max-inflight", "0"],
        env=executor_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 2 and "--executor-max-inflight" in proc.stderr


def test_sdk_import_is_light_and_refuses_use_outside_a_call():
    code = (
        "import sys\n"
        "from blockx_executor import sdk\n"
        "heavy = sorted(n for n in sys.modules if n.startswith(('blockx', 'asyncio', 'socket')))\n"
        "print(heavy)\n"
        "try:\n"
        "    sdk.sleep(1)\n"
        "except RuntimeError as e:\n"
        "    print('refused')\n")
    proc = subprocess.run([sys.executable, "-c", code], env=executor_env(),
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "['blockx_executor', 'blockx_executor.jsonenc', 'blockx_executor.sdk']"
    assert lines[1] == "refused"


def test_exits_when_the_worker_goes_away_during_an_endless_call(make_worker):
    w = make_worker({"spin": fn.SPIN})
    w.execute("c1", "spin", [60_000])  # no budget: nothing preempts it
    w.wait_heartbeat(lambda hb: hb["runningCallId"] == "c1")
    w.close_socket()
    assert w.wait_exit(timeout=8) == 0
    assert "still running" in w.stderr()


def test_heartbeat_advertises_execute_call_batch_and_a_batch_runs(make_worker):
    w = make_worker({"add": fn.ADD})
    hb = w.wait_heartbeat(lambda hb: True)
    assert hb["seq"] == 1 and hb["features"] == [m.FEATURE_EXECUTE_CALL_BATCH]
    d = digest_of(fn.ADD)
    w.send(m.execute_call_batch([m.execute_call(f"b{i}", "t", "add", d, [i, 10], 1) for i in range(3)]))
    w.execute("s", "add", [1, 1])   # single frames still work beside batches
    got = {}
    for _ in range(4):
        env, _ = w.expect(m.CALL_COMPLETED)
        got[env["callId"]] = env["payload"]["output"]
    assert got == {"b0": 10, "b1": 11, "b2": 12, "s": 2}


def test_malformed_execute_call_batch_exits_non_zero_and_runs_none_of_it(make_worker):
    w = make_worker({"add": fn.ADD})
    w.wait_heartbeat(lambda hb: True)
    d = digest_of(fn.ADD)
    w.send(m.execute_call_batch([m.execute_call("b0", "t", "add", d, [1, 1], 1), m.cancel_call("b0", 1)]))
    assert w.wait_exit() == 2
    assert "breaks the UDS contract" in w.stderr() and "ExecuteCallBatch element 1" in w.stderr()
    w.no_frame(0.1)


def test_execute_call_batch_whose_calls_is_not_a_list_exits_non_zero(make_worker):
    w = make_worker({})
    w.wait_heartbeat(lambda hb: True)
    w.send({"messageType": "ExecuteCallBatch", "callId": "", "requestId": "", "payload": {"calls": {"a": 1}}})
    assert w.wait_exit() == 2
    assert "ExecuteCallBatch payload key 'calls' must be an array" in w.stderr()
