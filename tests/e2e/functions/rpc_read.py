"""rpc_read(endpoint, method, params) -> the JSON-RPC result, read through the Worker's rpc IO backend."""
from blockx_executor import sdk


def main(endpoint, method, params):
    return sdk.io("rpc", {"endpoint": endpoint, "method": method, "params": params})
