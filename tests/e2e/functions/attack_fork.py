"""attack_fork(n): fork n processes that each sleep; kills them again at the end."""
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
    except OSError as exc:
        raise RuntimeError(f"fork refused after {len(kids)} processes: {exc}") from None
    finally:
        for pid in kids:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return len(kids)
