"""ver_later(ms): wait, then call `ver` as a subcall (resolved in the task's pinned code epoch)."""
from blockx_executor import sdk


def main(ms):
    sdk.sleep(ms)
    return sdk.call("ver")
