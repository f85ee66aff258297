"""spin(seconds) busy-loops without yielding to the executor's scheduler."""
import time


def main(seconds):
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return n
