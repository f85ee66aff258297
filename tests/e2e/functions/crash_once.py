"""crash_once(path): the first attempt records its executor's pid in `path` and blocks
(the test kills that executor); a later attempt returns "recovered"."""
import os
import time


def main(path):
    if not os.path.exists(path):
        with open(path + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(path + ".tmp", path)
        time.sleep(60)
        return "not killed"
    return "recovered"
