"""sleepy(seconds, value): hold the executor for `seconds`, then return `value`."""
import time


def main(seconds, value):
    time.sleep(seconds)
    return value
