"""rpc_loop(n, tag, repeat) -> n after n sequential eth_getBalance reads through the rpc IO backend.

The addresses differ by (tag, i // repeat): with repeat=1 every request is new
(the task's IO cache never answers, each read reaches the node); with repeat=k
each distinct read is asked k times in a row, and the cache answers k-1 of them."""

from blockx_executor import sdk


def main(n, tag=0, repeat=1):
    for i in range(n):
        address = "0xb10c%018x%018x" % (tag, i // repeat)
        r = sdk.io("rpc", {"endpoint": "node", "method": "eth_getBalance", "params": [address, "latest"]})
        if r != "0x0":
            raise RuntimeError(f"eth_getBalance of unfunded {address} answered {r!r}")
    return n
