"""io_loop(n, tag) -> n after n sequential devstub "echo" round trips.

Each request differs (tag, i) so the task's IO cache never answers: every
sdk.io is a real CallWaiting -> IO scope -> ResumeCall round trip."""

from blockx_executor import sdk


def main(n, tag=0):
    for i in range(n):
        r = sdk.io("devstub", {"op": "echo", "value": [tag, i]})
        if r["value"] != [tag, i]:
            raise RuntimeError(f"devstub echoed {r!r} for {[tag, i]!r}")
    return n
