"""chatty(lines, forged): print a forged Worker log line to stdout and stderr, one
over-long line, then `lines` more lines as fast as it can."""
import sys


def main(lines, forged):
    print(forged)
    print(forged, file=sys.stderr)
    print("L" * 100_000 + "-end-of-long-line")
    for i in range(lines):
        print(f"chatty line {i}")
    sys.stdout.flush()
    return lines
