"""rpc_then_sleep(endpoint, marker, sleep_ms): read the block number, write `marker`, sleep, then read a
balance (the test stops the node meanwhile)."""
from blockx_executor import sdk


def main(endpoint, marker, sleep_ms):
    first = sdk.io("rpc", {"endpoint": endpoint, "method": "eth_blockNumber", "params": []})
    with open(marker, "w") as f:
        f.write(first)
    sdk.sleep(sleep_ms)
    return sdk.io("rpc", {"endpoint": endpoint, "method": "eth_getBalance",
                          "params": ["0x90F8bf6A479f320ead074411a4B0e7944Ea8c9C1", "latest"]})
