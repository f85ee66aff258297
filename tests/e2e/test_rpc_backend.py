"""The rpc IO backend end to end: a real Worker with real executors reads a real
Ethereum JSON-RPC node (ganache, deterministic wallet) through named endpoints.
Reads, a batch, the per-task cache, a wrong method caught as sdk.RpcError; the
node stopped mid-task, a slow node, a malformed answer and a dead URL are each a
clear call error (or a failover), and the Worker serves a normal task after each."""
from __future__ import annotations

import json
import os
import re
import time

import pytest

from tests.support.etcd import free_port
from tests.support.ganache import ACCOUNT0, ACCOUNT0_BALANCE_WEI, GanacheNode, ganache_fixture
from tests.support.scripted_rpc_server import ScriptedRpcServer
from tests.support.worker import outputs

pytestmark = pytest.mark.e2e

ganache = ganache_fixture(scope="module")
ONE_ATTEMPT = (1, 0, 0)      # a failed call fails the task at once: the error under test, not a retry


@pytest.fixture(scope="module")
def slow_server():
    with ScriptedRpcServer("sleep:5") as s:
        yield s


@pytest.fixture(scope="module")
def bad_server():
    with ScriptedRpcServer("malformed") as s:
        yield s


@pytest.fixture(scope="module")
def batch_server():
    with ScriptedRpcServer("ok") as s:
        yield s


@pytest.fixture(scope="module")
def doomed():
    """A node of its own for the test that stops it mid-task."""
    node = GanacheNode()
    node.start()
    yield node
    node.close()


@pytest.fixture(scope="module")
def rpc_worker(tmp_path_factory, ganache, slow_server, bad_server, batch_server, doomed):
    from tests.e2e.conftest import make_functions_dir
    from tests.support.worker import WorkerProcess

    endpoints = {
        "main": {"urls": [ganache.url], "headers": {"X-Node-Token": {"env": "E2E_NODE_TOKEN"}}},
        "failover": {"urls": [f"http://127.0.0.1:{free_port()}", ganache.url]},
        "slow": {"urls": [slow_server.url], "timeoutMs": 500},
        "bad": {"urls": [bad_server.url]},
        "scripted": {"urls": [batch_server.url], "concurrency": 1,
                     "headers": {"X-Node-Token": {"env": "E2E_NODE_TOKEN"}, "X-Team": "chain"}},
        "doomed": {"urls": [doomed.url], "timeoutMs": 2000},
    }
    fdir = make_functions_dir(tmp_path_factory.mktemp("fn"))
    w = WorkerProcess({"RPC_ENDPOINTS": json.dumps(endpoints), "E2E_NODE_TOKEN": "t0ken",
                       "TASK_SLOTS": "16", "RESULT_RETENTION_MS": "60000"}, functions_dir=fdir)
    w.start()
    try:
        yield w
    finally:
        w.stop()


def run(w, task_id, calls, *, ok=True):
    w.submit_calls(task_id, calls, retry=ONE_ATTEMPT)
    res = w.wait_terminal(task_id, timeout=60)
    if ok:
        assert res.state == 3, res.failure_message           # SUCCEEDED
    return res


def still_serving(w, tag):
    res = run(w, f"after-{tag}", [("echo", [tag])])
    assert outputs(res) == [tag]


def test_block_number_and_balance_reads(rpc_worker, ganache):
    res = run(rpc_worker, "reads", [("rpc_read", ["main", "eth_blockNumber", []]),
                                    ("rpc_read", ["main", "eth_getBalance", [ACCOUNT0, "latest"]]),
                                    ("rpc_read", ["main", "eth_chainId", []])])
    block, balance, chain = outputs(res)
    assert int(block, 16) == int(ganache.call("eth_blockNumber"), 16)
    assert int(balance, 16) == ACCOUNT0_BALANCE_WEI
    assert chain == "0x539"                                    # --chain.chainId 1337


def test_a_batch_of_reads_from_many_calls(rpc_worker, ganache, batch_server):
    accounts = [ganache.call("eth_accounts")[i] for i in range(10)]
    calls = [("rpc_read", ["main", "eth_getBalance", [a, "latest"]]) for a in accounts]
    assert [int(b, 16) for b in outputs(run(rpc_worker, "batch", calls))] == [ACCOUNT0_BALANCE_WEI] * 10
    # the same burst to a node that shows what it received: fewer POSTs than reads, JSON arrays in them
    posts0 = batch_server.posts
    calls = [("rpc_read", ["scripted", "eth_getBalance", [a, "latest"]]) for a in accounts * 3]
    outs = outputs(run(rpc_worker, "batch-seen", calls))
    assert outs == [{"m": "eth_getBalance", "p": [a, "latest"]} for a in accounts * 3]
    bodies = batch_server.bodies[posts0:]
    assert len(bodies) < 30 and any(isinstance(b, list) and len(b) > 1 for b in bodies), bodies


def test_a_repeated_read_reaches_the_node_once_per_task(rpc_worker, batch_server):
    before = batch_server.requests
    res = run(rpc_worker, "cache", [("rpc_repeat", ["scripted", "eth_getBalance", [ACCOUNT0, "latest"], 50])])
    assert outputs(res) == [[{"m": "eth_getBalance", "p": [ACCOUNT0, "latest"]}]]
    assert batch_server.requests - before == 1
    run(rpc_worker, "cache-2", [("rpc_repeat", ["scripted", "eth_getBalance", [ACCOUNT0, "latest"], 5])])
    assert batch_server.requests - before == 2                 # another task asks the node again
    # the endpoint's headers, one read from the Worker's environment, reach the node
    assert batch_server.headers[-1]["X-Node-Token"] == "t0ken" and batch_server.headers[-1]["X-Team"] == "chain"


def test_a_wrong_method_is_a_typed_error_the_function_catches(rpc_worker):
    res = run(rpc_worker, "wrong", [("rpc_try", ["main", "eth_noSuchMethod", []])])
    # ganache 7 answers an unknown method with code -32700 (not -32601) and this message
    assert outputs(res) == [{"code": -32700, "kind": "RPC_ERROR", "isIOCallError": True,
                             "message": "The method eth_noSuchMethod does not exist/is not available"}]
    res = run(rpc_worker, "wrong-uncaught", [("rpc_read", ["main", "eth_noSuchMethod", []])], ok=False)
    assert res.state == 4 and res.failure_code == "CALL_FAILED"
    assert "JSON-RPC error -32700: The method eth_noSuchMethod does not exist" in res.failure_message
    still_serving(rpc_worker, "wrong")


def test_the_node_stopped_mid_task(rpc_worker, doomed, executor_tmp):
    marker = str(executor_tmp / "first-read")      # written by the function: a folder its executor may write
    rpc_worker.submit_calls("doomed", [("rpc_then_sleep", ["doomed", marker, 1500])], retry=ONE_ATTEMPT)
    deadline = time.monotonic() + 30
    while not os.path.exists(marker):
        assert time.monotonic() < deadline, "the first read never happened"
        time.sleep(0.02)
    doomed.stop()
    res = rpc_worker.wait_terminal("doomed", timeout=60)
    assert res.state == 4 and res.failure_code == "CALL_FAILED", res
    assert "rpc: endpoint 'doomed' failed after 3 attempt(s)" in res.failure_message
    assert "connection refused" in res.failure_message.lower() or "connect" in res.failure_message.lower()
    still_serving(rpc_worker, "doomed")


def test_a_slow_node_past_the_timeout(rpc_worker):
    t0 = time.monotonic()
    res = run(rpc_worker, "slow", [("rpc_read", ["slow", "eth_blockNumber", []])], ok=False)
    assert time.monotonic() - t0 < 4.5                         # the node would take 5 s
    assert res.state == 4 and res.failure_code == "CALL_FAILED"
    # The request's deadline and its HTTP attempt's expire together: whichever fires first words
    # it, the attempt naming the URL it waited on ("endpoint 'slow' (http://...) gave no answer").
    msg = res.failure_message
    assert re.search(r"rpc: endpoint 'slow' (\(http://127\.0\.0\.1:\d+\) )?gave no answer within 500 ms "
                     r"\(ioBackends\.rpc\.endpoints\.slow\.timeoutMs, or ioBackends\.rpc\.timeoutMs\)", msg), msg
    still_serving(rpc_worker, "slow")


def test_a_malformed_answer(rpc_worker):
    res = run(rpc_worker, "bad", [("rpc_read", ["bad", "eth_blockNumber", []])], ok=False)
    assert res.state == 4 and res.failure_code == "CALL_FAILED"
    assert "sent a malformed response (not JSON): '<html>502 bad gateway</html>'" in res.failure_message
    still_serving(rpc_worker, "bad")


def test_failover_from_a_dead_url_to_the_node(rpc_worker):
    res = run(rpc_worker, "failover", [("rpc_read", ["failover", "eth_getBalance", [ACCOUNT0, "latest"]])])
    assert int(outputs(res)[0], 16) == ACCOUNT0_BALANCE_WEI


def test_an_unknown_endpoint_is_refused_naming_the_configured_ones(rpc_worker):
    res = run(rpc_worker, "unknown-ep", [("rpc_read", ["mian", "eth_blockNumber", []])], ok=False)
    assert "unknown endpoint 'mian' (configured in ioBackends.rpc.endpoints: bad, doomed, failover, main, " \
           "scripted, slow)" in res.failure_message
    still_serving(rpc_worker, "unknown-ep")
