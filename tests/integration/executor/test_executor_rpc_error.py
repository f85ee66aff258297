"""A JSON-RPC error of the rpc backend reaches user code as sdk.RpcError with the
node's code, message and data; uncaught it fails the call as RPC_ERROR."""

from blockx.protocol import messages as m

RPC_CATCH = '''from blockx_executor import sdk

def main():
    try:
        sdk.io("rpc", {"endpoint": "main", "method": "eth_nope", "params": []})
    except sdk.RpcError as exc:
        return {"code": exc.code, "message": exc.rpc_message, "data": exc.data, "kind": exc.error_kind,
                "backend": exc.backend, "io": isinstance(exc, sdk.IOCallError), "text": str(exc)}
'''
RPC_PLAIN = '''from blockx_executor import sdk

def main():
    return sdk.io("rpc", {"endpoint": "main", "method": "eth_nope", "params": []})
'''


def rpc_error(call_id, request_id, data=None):
    env = m.resume_call_error(call_id, request_id, "io", "RPC_ERROR", "rpc: eth_nope failed: JSON-RPC error -32601",
                              False)
    rpc = {"code": -32601, "message": "Method not found"}
    if data is not None:
        rpc["data"] = data
    env["payload"]["error"]["rpcError"] = rpc
    return env


def test_a_json_rpc_error_is_caught_as_rpc_error_with_its_code(make_worker):
    w = make_worker({"rc": RPC_CATCH})
    w.execute("c1", "rc", [])
    env, _ = w.expect(m.CALL_WAITING, "c1")
    w.send(rpc_error("c1", env["requestId"], data={"detail": 1}))
    out = w.expect(m.CALL_COMPLETED, "c1")[0]["payload"]["output"]
    assert out == {"code": -32601, "message": "Method not found", "data": {"detail": 1}, "kind": "RPC_ERROR",
                   "backend": "rpc", "io": True,
                   "text": "IO request to backend 'rpc' failed: rpc: eth_nope failed: JSON-RPC error -32601"}


def test_uncaught_it_fails_the_call_as_rpc_error(make_worker):
    w = make_worker({"rp": RPC_PLAIN})
    w.execute("c1", "rp", [])
    env, _ = w.expect(m.CALL_WAITING, "c1")
    w.send(rpc_error("c1", env["requestId"]))
    p = w.expect(m.CALL_FAILED, "c1")[0]["payload"]
    assert p["errorKind"] == "RPC_ERROR" and p["retryable"] is False
    assert "JSON-RPC error -32601" in p["errorMessage"] and "RpcError" in p["errorStack"]


def test_an_io_error_without_rpc_error_stays_an_io_call_error(make_worker):
    w = make_worker({"rc": RPC_CATCH})
    w.execute("c1", "rc", [])
    env, _ = w.expect(m.CALL_WAITING, "c1")
    w.send(m.resume_call_error("c1", env["requestId"], "io", "IO_ERROR", "rpc: endpoint down", True))
    p = w.expect(m.CALL_FAILED, "c1")[0]["payload"]
    assert p["errorKind"] == "IO_ERROR" and p["retryable"] is True and "IOCallError" in p["errorStack"]
