"""mark_after(marker, ms, value): write `marker`.started, sleep `ms` (sdk.sleep: a
CancelCall aborts it), then write `marker` and return `value`."""
from blockx_executor import sdk


def main(marker, ms, value=None):
    with open(marker + ".started", "w") as f:
        f.write("started")
    sdk.sleep(ms)
    with open(marker, "w") as f:
        f.write("done")
    return value
