"""flaky(path, fails) fails retryably `fails` times (counting attempts in `path`), then returns the attempt number."""
import os


class Transient(Exception):
    retryable = True


def main(path, fails):
    n = 1
    if os.path.exists(path):
        with open(path) as f:
            n = int(f.read()) + 1
    with open(path, "w") as f:
        f.write(str(n))
    if n <= fails:
        raise Transient(f"attempt {n} fails on purpose")
    return n
