"""The bundle writers' work files under the bundle root, and the sweep that removes
the ones a dead Worker left.

bundleWrite writes beside the task's final file: a collected write through a
temporary file ``.<file>.<12 hex>.tmp``, a streamed one in a work directory
``.<file>.<12 hex>.tmp.d`` (the temporary file and DuckDB's spill). A writer that
ends removes them; a Worker killed mid-write (SIGKILL, the OOM killer, a power
loss) cannot, and nothing else would. So every writer holds an exclusive flock(2)
on its work file or directory (``hold``) from the moment it creates it until it
has removed it; the kernel drops the lock when the process dies.

A writer never shows an unlocked work name: it creates the file or directory
under a staging name (the same with ``.new`` appended), locks it and renames it
to its work name (``create_file``, ``create_dir``; the lock stays with the
inode). So an unlocked work name is a dead writer's, whatever its age, and a
Worker restarted the instant after a crash sweeps it.

``sweep`` (at Worker start, in a thread) walks the bundle root and removes every
entry of exactly those names whose lock it can take, holding the lock while it
removes it: a writer of another live Worker sharing the root keeps its lock and
its files. A staging name is removed only once older than ``min_age_s`` (a live
writer holds it for an instant; a writer killed in that instant leaves it).
Anything else is left: other names, symlinks (never followed, never removed)
and what is not a plain file or directory. The walk never enters a work
directory and stops when ``stop`` is set (a Worker that shuts down mid-sweep)."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import stat
import threading
import time
from dataclasses import dataclass, field

WORK_NAME = re.compile(r"\..+\.[0-9a-f]{12}\.tmp(\.d)?(\.new)?")
STAGING = ".new"
MIN_AGE_S = 60.0


def create_file(path: str, mode: int) -> int:
    """The empty work file `path` (mode, O_EXCL, O_NOFOLLOW), locked before it
    appears under its name: the descriptor that holds the lock (``release``)."""
    staging = path + STAGING
    os.close(os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode))
    return _publish(staging, path)


def create_dir(path: str, mode: int) -> int:
    """The empty work directory `path`, locked before it appears under its name."""
    staging = path + STAGING
    os.mkdir(staging, mode)
    return _publish(staging, path)


def _publish(staging: str, path: str) -> int:
    fd = hold(staging)
    try:
        if os.path.lexists(path):
            raise FileExistsError(f"{path} exists")
        os.rename(staging, path)
    except BaseException:
        release(fd)
        raise
    return fd


def hold(path: str) -> int:
    """An exclusive lock on the work file or directory `path` just created: the
    descriptor to give to ``release`` once `path` is removed or renamed away."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)          # the lock goes with the descriptor


@dataclass
class Swept:
    removed: list[str] = field(default_factory=list)    # relative to the root
    busy: int = 0            # work of a live writer, left
    young: int = 0           # an unlocked staging name younger than min_age_s, left
    failed: list[str] = field(default_factory=list)     # could not be removed (the reason, per entry)


def sweep(root: str, *, min_age_s: float = MIN_AGE_S, stop: threading.Event | None = None,
          now: float | None = None) -> Swept:
    """Remove the work a dead writer left under `root` (see the module's text)."""
    out = Swept()
    if not root or not os.path.isdir(root):
        return out
    t = time.time() if now is None else now
    for top, dirs, files in os.walk(root, followlinks=False):
        if stop is not None and stop.is_set():
            break
        for name in [d for d in dirs if WORK_NAME.fullmatch(d)]:
            dirs.remove(name)                       # never walk into a work directory
            _sweep_one(root, os.path.join(top, name), True, min_age_s, t, out)
        for name in files:
            if WORK_NAME.fullmatch(name):
                _sweep_one(root, os.path.join(top, name), False, min_age_s, t, out)
    return out


def _sweep_one(root: str, path: str, is_dir: bool, min_age_s: float, now: float, out: Swept) -> None:
    rel = os.path.relpath(path, root)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not (stat.S_ISDIR(st.st_mode) if is_dir else stat.S_ISREG(st.st_mode)):
        return                                      # a symlink or a special file: not a writer's
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return                                      # gone, or replaced by a symlink meanwhile
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            out.busy += 1
            return
        if path.endswith(STAGING) and now - max(st.st_mtime, st.st_ctime) < min_age_s:
            out.young += 1
            return
        try:
            if is_dir:
                shutil.rmtree(path)
            else:
                os.unlink(path)
            out.removed.append(rel)
        except OSError as exc:
            out.failed.append(f"{rel}: {exc.strerror or exc}")
    finally:
        os.close(fd)
