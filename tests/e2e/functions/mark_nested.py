"""mark_nested(marker, ms, value): mark_after as a subcall, then write `marker`.parent."""
from blockx_executor import sdk


def main(marker, ms, value=None):
    out = sdk.call("mark_after", marker, ms, value)
    with open(marker + ".parent", "w") as f:
        f.write("done")
    return out
