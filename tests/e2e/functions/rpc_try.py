"""rpc_try(endpoint, method, params) -> {"result": ...}, or the node's JSON-RPC error caught as sdk.RpcError."""
from blockx_executor import sdk


def main(endpoint, method, params):
    try:
        return {"result": sdk.io("rpc", {"endpoint": endpoint, "method": method, "params": params})}
    except sdk.RpcError as exc:
        return {"code": exc.code, "message": exc.rpc_message, "kind": exc.error_kind,
                "isIOCallError": isinstance(exc, sdk.IOCallError)}
