"""CancelTask and ListTasks end to end: a real Worker, real executors, a real
DuckDB behind tableUpserts. A running callList task of slow calls (some with a
subcall) is cancelled over the unary RPC and over a TaskSession: its watchers
see FAILED / CANCELLED, the executors drop the calls (no call writes the marker
it would write after its sleep), the writer writes no row, and the one slot is
free for the next task at once."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time

import grpc
import pytest

from blockx.worker.v1 import worker_pb2 as pb
from tests.support import auth
from tests.support.worker import WorkerProcess, outputs

pytestmark = pytest.mark.e2e

SLEEP_MS = 4_000          # each call's sleep: its marker would appear well within the test
OUTLIVES_THE_TEST_MS = 300_000   # a call the test cancels, never one that may finish first


@pytest.fixture
def cancel_worker(start_worker, tmp_path):
    env = {"TASK_SLOTS": "1", "RESULT_RETENTION_MS": "60000", "STATE_DIR": str(tmp_path / "state"),
           "BLOCKX_DATA_SOURCES": json.dumps({"local": f"duckdb://{tmp_path}/state/local.duckdb"})}
    w = start_worker(env)
    _seed(w)
    return w


def _upserts(table="results"):
    return ("tableUpserts", {"target": "local", "table": table, "key": ["id"], "createTable": True})


def _seed(w):
    """One row in `results`, so the table exists and a count shows what a cancelled task added."""
    w.submit_calls("seed", [("echo", [{"id": 0, "v": 0}])], result_handler=_upserts())
    res = w.wait_terminal("seed")
    assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message


def _rows(w, tid):
    w.submit_calls(tid, [("sql_rows", ["local", "SELECT count(*) AS n FROM results"])])
    res = w.wait_terminal(tid)
    assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
    return outputs(res)[0][0]["n"]


def _slow_calls(tmp):
    """Four slow roots and two roots that each wait on a slow subcall."""
    calls = [("mark_after", [str(tmp / f"m{i}"), SLEEP_MS, {"id": i + 1, "v": i}]) for i in range(4)]
    calls += [("mark_nested", [str(tmp / f"n{i}"), SLEEP_MS, {"id": i + 10, "v": i}]) for i in range(2)]
    markers = [tmp / f"m{i}" for i in range(4)] + [tmp / f"n{i}" for i in range(2)]
    return calls, markers


def _wait_started(markers, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(f"{m}.started") for m in markers):
        assert time.monotonic() < deadline, "the calls (and subcalls) never all started"
        time.sleep(0.02)


def _inflight(w) -> int:
    st = w.stub.GetWorkerStatus(pb.GetWorkerStatusRequest(), timeout=5)
    return sum(e.inflight for e in st.executors)


def _assert_calls_stopped(w, markers, cancelled_at):
    """The executors dropped every call at once (none in flight), and none of them
    (nor any parent after its subcall) went on to write its marker."""
    deadline = time.monotonic() + 5
    while _inflight(w) != 0:
        assert time.monotonic() < deadline, "the executors still hold the cancelled calls"
        time.sleep(0.05)
    assert time.monotonic() - cancelled_at < SLEEP_MS / 1000, "too slow to tell a cancel from a finish"
    time.sleep(SLEEP_MS / 1000 - (time.monotonic() - cancelled_at) + 1.0)   # past when they would have written
    written = [str(m) for m in markers if os.path.exists(m) or os.path.exists(f"{m}.parent")]
    assert written == [], f"cancelled calls ran on: {written}"


def _watch(w, tid, into: list):
    for upd in w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=[tid]), timeout=60):
        into.append(upd)


def test_cancel_over_the_unary_rpc_stops_calls_and_subcalls_and_the_writer(cancel_worker, executor_tmp):
    w = cancel_worker
    calls, markers = _slow_calls(executor_tmp)
    w.submit_calls("slow", calls, result_handler=_upserts())
    seen: list = []
    watcher = threading.Thread(target=_watch, args=(w, "slow", seen), daemon=True)
    watcher.start()
    _wait_started(markers)
    with pytest.raises(grpc.RpcError) as no_slot:          # the one slot is taken
        w.submit_calls("blocked", [("add", [1, 2])])
    assert no_slot.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    resp = w.stub.CancelTask(pb.CancelTaskRequest(task_id="slow", reason="operator says stop"), timeout=10)
    cancelled_at = time.monotonic()
    assert resp.cancelled is True and resp.state == pb.TASK_STATE_FAILED
    assert resp.result.failure_code == "CANCELLED" and resp.result.retryable is False
    assert resp.result.failure_message == "the task was cancelled by 'admin': operator says stop"
    # the slot is free at once: the next task runs while the cancelled calls would still sleep
    w.submit_calls("next", [("add", [1, 2])])
    assert outputs(w.wait_terminal("next")) == [3]
    watcher.join(10)
    assert seen and seen[-1].is_terminal and seen[-1].result.failure_code == "CANCELLED"
    assert [u.state for u in seen if u.is_terminal] == [pb.TASK_STATE_FAILED]
    _assert_calls_stopped(w, markers, cancelled_at)
    assert _rows(w, "count") == 1                           # the seed row only: the writer never ran
    again = w.stub.CancelTask(pb.CancelTaskRequest(task_id="slow"), timeout=10)
    assert again.cancelled is False and again.result.failure_message == resp.result.failure_message
    done = w.stub.CancelTask(pb.CancelTaskRequest(task_id="next"), timeout=10)
    assert done.cancelled is False and done.state == pb.TASK_STATE_SUCCEEDED
    with pytest.raises(grpc.RpcError) as unknown:
        w.stub.CancelTask(pb.CancelTaskRequest(task_id="never"), timeout=10)
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    text = w.metrics_text()
    assert 'blockx_tasks_terminal_total{failure_code="CANCELLED",state="FAILED"} 1.0' in text
    assert 'blockx_grpc_requests_total{code="OK",method="CancelTask"} 3.0' in text


def test_cancel_over_a_session_reaches_its_own_watch(cancel_worker, executor_tmp):
    from blockx.client import WorkerClient

    w = cancel_worker
    calls, markers = _slow_calls(executor_tmp)

    async def run():
        async with WorkerClient(f"127.0.0.1:{w.port}") as c:
            await c.submit(calls, task_id="slow-s", wait=False)
            updates = []

            async def watch():
                async for u in c.watch(["slow-s"]):
                    updates.append(u)
            watcher = asyncio.get_running_loop().create_task(watch())
            await asyncio.to_thread(_wait_started, markers)
            out = await c.cancel("slow-s", "from a session")
            at = time.monotonic()
            await asyncio.wait_for(watcher, 10)
            after = await c.submit([("add", [2, 3])], task_id="next-s")
            return out, at, updates, after

    out, at, updates, after = asyncio.run(run())
    assert (out.state, out.failure_code, out.retryable, out.raw.cancelled) == ("FAILED", "CANCELLED", False, True)
    assert out.failure_message == "the task was cancelled by 'admin': from a session"
    assert updates[-1].is_terminal and updates[-1].outcome.failure_code == "CANCELLED"
    assert after.outputs == [5]
    _assert_calls_stopped(w, markers, at)


def test_cancel_while_queued_for_the_executor_gate_and_a_bare_reservation(start_worker, executor_tmp):
    # One task at a time in the Calls phase: the second waits on the gate with its slot held.
    w = start_worker({"TASK_SLOTS": "3", "EXECUTOR_TASK_SLOTS": "1", "RESULT_RETENTION_MS": "60000"})
    marker = executor_tmp / "gate"
    w.submit_calls("first", [("mark_after", [str(marker), SLEEP_MS, 1])])
    _wait_started([marker])
    w.submit_calls("queued", [("add", [1, 1])])
    w.stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id="reserved", ttl_ms=60_000), timeout=5)
    st = w.stub.GetWorkerStatus(pb.GetWorkerStatusRequest(), timeout=5)
    assert st.slots.free == 0 and st.tasks_by_phase["CALLS"] == 2
    for tid in ("queued", "reserved"):
        r = w.stub.CancelTask(pb.CancelTaskRequest(task_id=tid), timeout=5)
        assert r.cancelled and r.result.failure_code == "CANCELLED", tid
    st = w.stub.GetWorkerStatus(pb.GetWorkerStatusRequest(), timeout=5)
    assert st.slots.free == 2 and st.tasks_by_phase["CALLS"] == 1
    late = w.submit_calls("reserved", [("add", [1, 1])])          # the id holds its cancelled result
    assert late.state == pb.TASK_STATE_FAILED and late.result.failure_code == "CANCELLED"
    res = w.wait_terminal("first")                                # the one that held the gate is untouched
    assert res.state == pb.TASK_STATE_SUCCEEDED and outputs(res) == [1]
    w.submit_calls("after", [("add", [1, 1])])                    # the gate was passed on, not leaked
    assert outputs(w.wait_terminal("after")) == [2]


ALICE = "alice-" + "a" * 24
BOB = "bob-" + "b" * 24


@pytest.fixture
def owners_worker(tmp_path, functions_dir):
    tokens = auth.write_tokens(tmp_path, {"alice": ALICE, "bob": BOB, "admin": auth.HARNESS_TOKEN})
    # A call's budget (CALL_DEADLINE_MS, 5 s by default) counts its sleep: the long calls need a larger one.
    # Alice runs 5 tasks at once below: more than the default share of half the slots (fair shares are
    # tests/e2e/test_hostile_load.py's subject).
    w = WorkerProcess({"WORKER_AUTH_TOKENS_FILE": tokens, "TASK_SLOTS": "8", "RESULT_RETENTION_MS": "60000",
                       "CALL_DEADLINE_MS": str(2 * OUTLIVES_THE_TEST_MS), "MAX_SLOTS_PER_IDENTITY": "8"},
                      functions_dir=functions_dir)
    w.start()
    yield w
    w.stop()


def _stub(w, token):
    return pb_grpc_stub(auth.channel(f"127.0.0.1:{w.port}", token=token))


def pb_grpc_stub(ch):
    from blockx.worker.v1 import worker_pb2_grpc as pb_grpc
    return pb_grpc.WorkerServiceStub(ch)


def _task(tid, ms=SLEEP_MS, instance=""):
    return pb.SubmitTaskRequest(task=pb.Task(task_id=tid, instance_id=instance, function_call=pb.FunctionCallConfig(
        type="callList", payload=json.dumps({"calls": [{"functionId": "sleep_ms", "args": [ms]}]}).encode())))


def test_only_the_owner_or_an_admin_may_cancel(owners_worker):
    w = owners_worker
    alice, bob = _stub(w, ALICE), _stub(w, BOB)
    # Calls that outlive the test whatever the load: every cancel below meets a running task.
    alice.SubmitTask(_task("a1", ms=OUTLIVES_THE_TEST_MS), timeout=5)
    alice.SubmitTask(_task("a2", ms=OUTLIVES_THE_TEST_MS), timeout=5)
    with pytest.raises(grpc.RpcError) as denied:      # for bob the task does not exist (no existence oracle)
        bob.CancelTask(pb.CancelTaskRequest(task_id="a1", reason="mine"), timeout=5)
    with pytest.raises(grpc.RpcError) as unknown:
        bob.CancelTask(pb.CancelTaskRequest(task_id="never-used", reason="mine"), timeout=5)
    assert denied.value.code() == unknown.value.code() == grpc.StatusCode.NOT_FOUND
    assert denied.value.details() == unknown.value.details().replace("never-used", "a1")
    for tid in ("a1", "a2"):                         # untouched by the refused cancels
        got = alice.GetTaskResult(pb.GetTaskResultRequest(task_id=tid), timeout=5)
        assert got.state == pb.TASK_STATE_RUNNING, f"{tid}: {got}"
    with pytest.raises(grpc.RpcError) as anon:
        _stub(w, None).CancelTask(pb.CancelTaskRequest(task_id="a1"), timeout=5)
    assert anon.value.code() == grpc.StatusCode.UNAUTHENTICATED
    r = alice.CancelTask(pb.CancelTaskRequest(task_id="a1"), timeout=5)
    assert r.cancelled and r.result.failure_message == "the task was cancelled by 'alice'", str(r)
    r = w.stub.CancelTask(pb.CancelTaskRequest(task_id="a2", reason="admin"), timeout=5)
    assert r.cancelled and r.result.failure_message == "the task was cancelled by 'admin': admin", str(r)


def test_the_client_and_the_cli_read_another_identitys_cancel_as_not_found(owners_worker):
    """WorkerClient.cancel (the session op) and `blockx cancel` answer another
    identity's task as they answer an unknown id: NotFound / NOT_FOUND, the same
    message, the task untouched (their docstrings once said PermissionDenied)."""
    from blockx.client import BlockxError, NotFound, connect

    w = owners_worker
    addr = f"127.0.0.1:{w.port}"
    alice = _stub(w, ALICE)
    alice.SubmitTask(_task("own-1", ms=OUTLIVES_THE_TEST_MS), timeout=5)
    try:
        with connect(addr, token=BOB) as bob:
            with pytest.raises(BlockxError) as theirs:
                bob.cancel("own-1", "mine now")
            with pytest.raises(NotFound) as unknown:
                bob.cancel("never-used", "mine now")
        assert type(theirs.value) is NotFound, repr(theirs.value)
        assert str(theirs.value) == str(unknown.value).replace("never-used", "own-1")
        cli = [sys.executable, "-m", "blockx", "cancel", "--addr", addr, "--token", BOB]
        p = subprocess.run(cli + ["own-1"], capture_output=True, text=True, timeout=30)
        q = subprocess.run(cli + ["never-used"], capture_output=True, text=True, timeout=30)
        assert (p.returncode, q.returncode) == (1, 1), (p.stderr, q.stderr)
        assert p.stderr.startswith("error: NOT_FOUND: task 'own-1' is not known"), p.stderr
        assert p.stderr == q.stderr.replace("never-used", "own-1")
        got = alice.GetTaskResult(pb.GetTaskResultRequest(task_id="own-1"), timeout=5)
        assert got.state == pb.TASK_STATE_RUNNING, str(got)          # untouched by the refused cancels
    finally:       # the task outlives the test: it must not hold the worker's drain at teardown
        assert alice.CancelTask(pb.CancelTaskRequest(task_id="own-1"), timeout=5).task_id == "own-1"


def test_list_tasks_filters_pages_and_shows_each_caller_its_own(owners_worker):
    w = owners_worker
    alice, bob = _stub(w, ALICE), _stub(w, BOB)
    for i in range(5):
        alice.SubmitTask(_task(f"a{i}", 20_000 if i < 3 else 1, instance="i1" if i % 2 else "i2"), timeout=5)
    bob.SubmitTask(_task("b0", 20_000, instance="i1"), timeout=5)
    for tid in ("a3", "a4"):
        for upd in alice.WatchTasks(pb.WatchTasksRequest(task_ids=[tid]), timeout=20):
            pass
    deadline = time.monotonic() + 10
    while True:                                            # the slow ones reach their Calls phase
        page = w.stub.ListTasks(pb.ListTasksRequest(phases=["CALLS"]), timeout=5)
        if len(page.tasks) == 4:
            break
        assert time.monotonic() < deadline, page
        time.sleep(0.05)
    assert {t.task_id for t in page.tasks} == {"a0", "a1", "a2", "b0"}
    for t in page.tasks:
        assert t.state == pb.TASK_STATE_RUNNING and t.calls_total == 1 and t.calls_done == 0
        assert t.owner == ("bob" if t.task_id == "b0" else "alice")
        assert 0 <= t.age_ms < 60_000 and t.created_at_ms > 0 and t.slot_id.startswith("slot-")
    # alice walks her tasks two at a time: every one once, in id order
    seen, token = [], ""
    while True:
        page = alice.ListTasks(pb.ListTasksRequest(page_size=2, page_token=token), timeout=5)
        assert len(page.tasks) <= 2
        seen += [t.task_id for t in page.tasks]
        token = page.next_page_token
        if not token:
            break
    assert seen == ["a0", "a1", "a2", "a3", "a4"]
    assert [t.task_id for t in bob.ListTasks(pb.ListTasksRequest(), timeout=5).tasks] == ["b0"]
    done = alice.ListTasks(pb.ListTasksRequest(states=[pb.TASK_STATE_SUCCEEDED]), timeout=5).tasks
    assert [(t.task_id, t.phase, t.calls_done, t.calls_total) for t in done] == [("a3", "TERMINAL", 1, 1),
                                                                               ("a4", "TERMINAL", 1, 1)]
    i1 = w.stub.ListTasks(pb.ListTasksRequest(instance_id="i1", states=[pb.TASK_STATE_RUNNING]), timeout=5).tasks
    assert [t.task_id for t in i1] == ["a1", "b0"]
    for bad, needle in ((pb.ListTasksRequest(page_size=-1), "page_size is -1"),
                        (pb.ListTasksRequest(phases=["RUNNING"]), "phases holds 'RUNNING', which is no phase"),
                        (pb.ListTasksRequest(states=[0]), "states holds 0, which is no task state"),
                        (pb.ListTasksRequest(page_token="forged"), "page_token is not a token this worker issued")):
        with pytest.raises(grpc.RpcError) as err:
            w.stub.ListTasks(bad, timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and needle in err.value.details()


# ---- a writer cancelled while it writes -------------------------------------------------


@pytest.fixture
def pg_worker(start_worker, pg_db, tmp_path):
    dsn = pg_db
    w = start_worker({"TASK_SLOTS": "2", "RESULT_RETENTION_MS": "60000", "STATE_DIR": str(tmp_path / "state"),
                      "BLOCKX_DATA_SOURCES": json.dumps({"main": dsn})})
    w.dsn = dsn
    return w


def test_a_writer_cancelled_mid_write_rolls_back_and_writes_nothing(pg_worker):
    """The table is locked by the test, so the writer's INSERT waits inside its
    transaction (phase PLUGIN); the cancel ends that wait, the transaction rolls
    back, and once the lock is gone no row of the cancelled task appears."""
    import asyncpg

    w = pg_worker
    handler = ("tableUpserts", {"target": "main", "table": "results", "key": ["id"], "createTable": True})
    w.submit_calls("seed", [("echo", [{"id": 0, "v": 0}])], result_handler=handler)
    assert w.wait_terminal("seed").state == pb.TASK_STATE_SUCCEEDED

    async def run():
        lock = await asyncpg.connect(w.dsn)
        try:
            tx = lock.transaction()
            await tx.start()
            await lock.execute("LOCK TABLE results IN ACCESS EXCLUSIVE MODE")
            w.submit_calls("write", [("echo", [{"id": i, "v": i}]) for i in range(1, 51)], result_handler=handler)
            deadline = time.monotonic() + 15
            while True:        # the writer runs and waits on the lock
                rows = w.stub.ListTasks(pb.ListTasksRequest(phases=["PLUGIN"]), timeout=5).tasks
                waiting = await lock.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")
                if rows and waiting:
                    break
                assert time.monotonic() < deadline, "the writer never reached its INSERT"
                await asyncio.sleep(0.05)
            resp = w.stub.CancelTask(pb.CancelTaskRequest(task_id="write", reason="mid-write"), timeout=5)
            assert resp.cancelled and resp.result.failure_code == "CANCELLED"
            deadline = time.monotonic() + 5
            while await lock.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"):
                assert time.monotonic() < deadline, "the cancelled writer still waits on the table"
                await asyncio.sleep(0.05)
            await tx.commit()                 # the lock goes: a writer still alive would write now
            await asyncio.sleep(1.0)
            return await lock.fetchval("SELECT count(*) FROM results")
        finally:
            await lock.close()

    assert asyncio.run(run()) == 1            # the seed row only
    res = w.result("write").result
    assert res.failure_code == "CANCELLED" and res.statistic.plugin_ms > 0
    w.submit_calls("after", [("echo", [{"id": 99, "v": 99}])], result_handler=handler)
    assert w.wait_terminal("after").state == pb.TASK_STATE_SUCCEEDED        # the source still writes


def test_a_task_cancelled_while_its_builder_runs_stops_the_query(pg_worker):
    """dbscan opens its query in the Builder phase; a cancel then ends the task
    at once and the database stops running the query."""
    import asyncpg

    w = pg_worker
    slow = "SELECT i AS id FROM generate_series(1, 3) AS t(i) WHERE pg_sleep(20) IS NOT NULL"
    w.submit("scan", "dbscan", {"source": "main", "query": slow, "functionId": "echo"})

    async def sleeping(conn) -> int:
        return await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(20)%' "
                                   "AND state = 'active' AND pid <> pg_backend_pid()")

    async def run():
        conn = await asyncpg.connect(w.dsn)
        try:
            deadline = time.monotonic() + 15
            while not await sleeping(conn):
                assert time.monotonic() < deadline, "the builder's query never started"
                await asyncio.sleep(0.05)
            phase = w.stub.ListTasks(pb.ListTasksRequest(), timeout=5).tasks
            assert [(t.task_id, t.phase) for t in phase] == [("scan", "BUILDER")]
            t0 = time.monotonic()
            resp = w.stub.CancelTask(pb.CancelTaskRequest(task_id="scan"), timeout=5)
            assert resp.cancelled and resp.result.failure_code == "CANCELLED"
            while await sleeping(conn):
                assert time.monotonic() - t0 < 5, "the cancelled builder's query still runs"
                await asyncio.sleep(0.05)
        finally:
            await conn.close()

    asyncio.run(run())
    assert w.result("scan").result.statistic.builder_ms > 0
    st = w.stub.GetWorkerStatus(pb.GetWorkerStatusRequest(), timeout=5)
    assert st.slots.free == st.slots.total and st.tasks_by_phase["BUILDER"] == 0
