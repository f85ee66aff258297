"""Which user process-mode executors run as (EXECUTOR_USER).

A Worker running as root starts its process-mode executors as root and has
each of them leave root for EXECUTOR_USER before it attaches (the executor's
--run-as-user, blockx_executor.privileges): user code then cannot read the
Worker's /proc/<pid>/environ, memory or root-only files. A Worker that is not
root cannot change users; its executors run as its own user, as before (the
attach secret still keeps other processes from posing as an executor)."""

from __future__ import annotations

import os
import pwd

__all__ = ["executor_run_as_user", "run_as_problem"]


def run_as_problem(user: str, setting: str = "executorUser (EXECUTOR_USER)") -> str | None:
    """Why `user` cannot be the executors' user here, or None. Only a root
    Worker switches users, so only then is the user checked."""
    if os.geteuid() != 0:
        return None
    if not user:
        return f"{setting} must name an unprivileged user (default \"nobody\"), or \"root\""
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return f"{setting}: there is no user {user!r} on this host; create it or name another one"
    if pw.pw_uid == 0 and user != "root":
        return (f"{setting}: {user!r} has uid 0; name an unprivileged user, or \"root\" to keep "
                "executors as root on purpose")
    return None


def executor_run_as_user(spawn_mode: str, user: str) -> str:
    """The user process-mode executors leave root for, or "" (they keep the
    Worker's user: a Worker that is not root, or EXECUTOR_USER=root, which
    keeps user code as root on purpose, e.g. for a profiler that must write
    its counts from the executors; the pool warns about it at start)."""
    if spawn_mode != "process" or os.geteuid() != 0 or user == "root":
        return ""
    return user
