"""sf_once(path, marks, fail): append one line to `path` (so a test counts how often
the body ran), wait until every file in `marks` exists (the parents that ask for
this subcall have all asked; bounded), linger, then return "once" or raise."""
import os

from blockx_executor import sdk


def main(path, marks, fail=False):
    with open(path, "a") as f:
        f.write("ran\n")
    for _ in range(150):                    # at most ~3 s of the call's budget
        if all(os.path.exists(m) for m in marks):
            break
        sdk.sleep(20)
    sdk.sleep(600)                          # the other parents' requests arrive meanwhile
    if fail:
        raise ValueError("sf_once failed on purpose")
    return "once"
