"""fork_then_die(n): fork until the process limit refuses, then end the executor
(exit code 3), as a program that cannot carry on without its processes would."""
import os
import signal
import time


def main(n):
    kids = []
    try:
        for _ in range(n):
            pid = os.fork()
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            kids.append(pid)
    except OSError:
        pass
    for pid in kids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    os._exit(3)
