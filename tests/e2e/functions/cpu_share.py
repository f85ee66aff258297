"""cpu_share(seconds): spin for `seconds` of wall time; the CPU time this
process got per second of wall time."""
import time


def main(seconds):
    t0, c0 = time.monotonic(), time.process_time()
    while time.monotonic() - t0 < seconds:
        sum(range(1000))
    return (time.process_time() - c0) / (time.monotonic() - t0)
