"""rpc_repeat(endpoint, method, params, n) reads the same request n times in one call; returns the distinct answers."""
from blockx_executor import sdk


def main(endpoint, method, params, n):
    seen = []
    for _ in range(n):
        r = sdk.io("rpc", {"endpoint": endpoint, "method": method, "params": params})
        if r not in seen:
            seen.append(r)
    return seen
