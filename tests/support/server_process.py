"""What the harnesses of the servers the tests start (etcd, Redis) share: ending
the process, and the tail of its log for a failure message."""
from __future__ import annotations

import pathlib
import signal
import subprocess


def terminate(proc: subprocess.Popen | None, *, kill: bool, timeout: float) -> None:
    """SIGTERM (or SIGKILL) ``proc`` and wait, bounded; SIGKILL if it outlives the wait."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    except ProcessLookupError:
        pass


def log_tail(path: pathlib.Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"
