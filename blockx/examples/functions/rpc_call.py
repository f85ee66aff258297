"""rpc_call(endpoint, method, *params) -> {"result": ...} or {"rpcError": {"code", "message"}}: one
JSON-RPC request to a chain node through the Worker's `rpc` IO backend (the function names an
endpoint of ioBackends.rpc.endpoints, never a URL or a token):

    blockx submit --calls 'rpc_call:"main","eth_getBalance","0x90F8bf6A479f320ead074411a4B0e7944Ea8c9C1","latest"'

A JSON-RPC error of the node is caught as sdk.RpcError (its code and message);
any other IO failure (node down, timeout, malformed answer) fails the call."""

from blockx_executor import sdk


def main(endpoint, method, *params):
    try:
        return {"result": sdk.io("rpc", {"endpoint": endpoint, "method": method, "params": list(params)})}
    except sdk.RpcError as exc:
        return {"rpcError": {"code": exc.code, "message": exc.rpc_message}}
