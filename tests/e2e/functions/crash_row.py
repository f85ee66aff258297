"""crash_row(i, path): a table row {"id": i, "v": i}; for i == 0 the first attempt
records its executor's pid in `path` and blocks (the test kills that executor)."""
import os
import time


def main(i, path):
    if i == 0 and not os.path.exists(path):
        with open(path + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(path + ".tmp", path)
        time.sleep(60)
    return {"id": i, "v": i}
