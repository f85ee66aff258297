"""Leave root before any user code runs (process mode, Worker running as root).

The executor is started as root (so it can be exec'ed from wherever the
interpreter lives, and connect to the Worker's private socket), and then,
before it attaches or loads any function:

1. enters a mount namespace of its own (unshare(CLONE_NEWNS), mounts private);
2. for every directory the interpreter needs (sys.path, the Python prefixes,
   the blockx packages) that the target user cannot reach because an ancestor
   is closed to it (e.g. /root, mode 0700, holding a pyenv Python), covers that
   ancestor with a read-only tmpfs in which only the needed directories are
   bound back, read-only. Nothing else of the covered tree is visible;
3. chdirs to "/", so no path is resolved relative to the Worker's directory;
4. drops every supplementary group, then the gid, then the uid (setgroups,
   setgid, setuid: all of real, effective and saved ids), and sets
   no_new_privs, so no setuid program gives root back.

As another user, and non-dumpable (the kernel clears "dumpable" on that uid
change; we set it explicitly too), the process cannot read /proc/<pid>/environ
or the memory of the Worker or of another executor. Its connection to the
Worker was opened before, as root; the socket directory stays the Worker's
own (0700), so user code cannot open a second connection at all.

Only Linux; libc is reached through ctypes (Python 3.11 has no os.unshare)."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import pwd
import stat
import sys

CLONE_NEWNS = 0x00020000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38


class PrivilegeError(Exception):
    """Cannot become the executor user; the message says why and what to change."""


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.unshare.argtypes = [ctypes.c_int]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return libc


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise PrivilegeError(f"{what}: {os.strerror(err)} (errno {err})")


def _may_enter(st: os.stat_result, uid: int, gids: set[int], bits: int) -> bool:
    """Whether uid/gids have `bits` (r=4, x=1) on a file with stat `st`."""
    if st.st_uid == uid:
        return (st.st_mode >> 6) & bits == bits
    if st.st_gid in gids:
        return (st.st_mode >> 3) & bits == bits
    return st.st_mode & bits == bits


def needed_dirs() -> list[str]:
    """The directories the interpreter may import from after the drop."""
    out: list[str] = []
    candidates = [sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix,
                  os.path.dirname(os.path.realpath(sys.executable)), *sys.path]
    for mod in ("blockx", "blockx_executor"):
        m = sys.modules.get(mod)
        for p in getattr(m, "__path__", ()) if m is not None else ():
            candidates.append(p)
    for mod in ("greenlet", "orjson"):      # the runtime's own packages (maybe not imported yet)
        try:
            spec = importlib.util.find_spec(mod)
        except (ImportError, ValueError):
            spec = None
        candidates += list(spec.submodule_search_locations or ()) if spec is not None else []
    for p in candidates:
        if not p:
            continue
        real = os.path.realpath(p)
        if not os.path.isdir(real):
            real = os.path.dirname(real)            # python311.zip and the like
        if os.path.isdir(real) and real not in out:
            out.append(real)
    return out


def blocked_ancestor(path: str, uid: int, gids: set[int]) -> str | None:
    """The topmost ancestor of `path` (excluding it) the user cannot traverse."""
    parts = path.strip("/").split("/")
    cur = ""
    for part in parts[:-1]:
        cur = f"{cur}/{part}"
        try:
            st = os.stat(cur)
        except OSError:
            return None
        if not _may_enter(st, uid, gids, 1):
            return cur
    return None


def plan(dirs: list[str], uid: int, gids: set[int]) -> dict[str, list[str]]:
    """{covered ancestor: [needed dirs under it]}; raises when a needed dir itself
    is closed to the user (covering cannot fix the mode of the dir itself)."""
    covers: dict[str, list[str]] = {}
    for d in dirs:
        top = blocked_ancestor(d, uid, gids)
        if top is not None:
            covers.setdefault(top, []).append(d)
    for top, under in covers.items():
        for d in under:
            st = os.stat(d)
            if not _may_enter(st, uid, gids, 5):
                raise PrivilegeError(
                    f"the executor user (uid {uid}) cannot read {d!r} (mode {stat.S_IMODE(st.st_mode):04o}): "
                    "install Python and the venv where that user may read them")
    # Never nested: a dir below a blocked ancestor has that ancestor as its topmost one.
    return covers


def drop_to(user: str) -> tuple[int, int]:
    """Become `user` as described above; returns (uid, gid). Needs root."""
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise PrivilegeError(f"executor user {user!r} does not exist on this host (EXECUTOR_USER)") from None
    uid, gid = pw.pw_uid, pw.pw_gid
    if uid == 0:
        raise PrivilegeError(f"executor user {user!r} is root; name an unprivileged user (EXECUTOR_USER)")
    if os.geteuid() != 0:
        raise PrivilegeError("dropping to the executor user needs root")
    covers = plan(needed_dirs(), uid, {gid})
    libc = _libc()
    if covers:
        _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "making mounts private")
        for top, under in covers.items():
            fds = [(d, os.open(d, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)) for d in sorted(set(under))]
            try:
                _check(libc.mount(b"tmpfs", top.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                                  b"mode=0755,size=1m"), f"covering {top} with a tmpfs")
                for d, fd in fds:
                    os.makedirs(d, mode=0o755, exist_ok=True)
                    _check(libc.mount(f"/proc/self/fd/{fd}".encode(), d.encode(), None, MS_BIND | MS_REC, None),
                           f"binding {d}")
                    _check(libc.mount(None, d.encode(), None,
                                      MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None),
                           f"making {d} read-only")
            finally:
                for _d, fd in fds:
                    os.close(fd)
            _check(libc.mount(None, top.encode(), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
                              b"mode=0755"), f"making the tmpfs on {top} read-only")
    os.chdir("/")
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid or os.getegid() != gid:
        raise PrivilegeError(f"the uid/gid change to {user!r} did not hold")
    try:
        os.setuid(0)
    except PermissionError:
        pass
    else:
        raise PrivilegeError("root could be regained after the drop")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")
    return uid, gid


__all__ = ["PrivilegeError", "blocked_ancestor", "drop_to", "needed_dirs", "plan"]
