"""Opening a private directory and the files in it so that what is checked is what is used.

STATE_DIR holds the admin token the Worker generates, so another local user who
could create that directory (or the token file, or a symbolic link in their
place) before the Worker would choose the admin token. A check of the path
followed by a later use of the same path leaves that window open. Here the
directory is opened once, without following a link (``O_NOFOLLOW |
O_DIRECTORY``), and the owner and mode are read from the open descriptor
(``fstat``); the files in it are created or opened relative to that descriptor
(``dir_fd=``), again without following a link, and checked the same way. So the
directory and the file the Worker uses are the ones it checked, whatever is
renamed or replaced meanwhile.

The rules: the directory and the file belong to the Worker's effective user; no
one else may write into the directory (group or other write bits); the file is
a regular file with one name that only its owner can read (0600, tightened on
the descriptor when the Worker's own file is looser). A refusal is
``UnsafePath``, whose message names the path, the owner found and what to do."""
from __future__ import annotations

import errno
import os
import stat

DIR_MODE = 0o700
FILE_MODE = 0o600
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted under the file's name must not block the open
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(Exception):
    """A directory or file another local user owns, could write, or links elsewhere."""


def _owner(uid: int) -> str:
    try:
        import pwd
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def dir_problem(st: os.stat_result, path: str, what: str) -> str | None:
    """Why the directory of ``st`` (an fstat of the open directory) is not private, or None."""
    euid = os.geteuid()
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != euid:
        return (f"{what} {path!r} belongs to {_owner(st.st_uid)}, not to the worker's user ({_owner(euid)}): "
                f"another local user could have put files there; remove it (or set {what} to a directory "
                "of the worker's own user) and start again: the worker creates it with mode 0700")
    if mode & 0o022:
        return (f"{what} {path!r} has mode {mode:04o}: other users can write into it; "
                f"`chmod 700 {path}`, remove any file you did not put there, and start again")
    return None


def file_problem(st: os.stat_result, path: str) -> str | None:
    """Why the file of ``st`` (an fstat of the open file) cannot be trusted, or None."""
    euid = os.geteuid()
    if not stat.S_ISREG(st.st_mode):
        return f"{path!r} is not a regular file: remove it and start again (the worker writes a new one)"
    if st.st_uid != euid:
        return (f"{path!r} belongs to {_owner(st.st_uid)}, not to the worker's user ({_owner(euid)}): "
                "another local user could have chosen its content; remove it and start again "
                "(the worker writes a new one)")
    if st.st_nlink != 1:
        return (f"{path!r} has {st.st_nlink} names (hard links): another name may be readable elsewhere; "
                "remove it and start again (the worker writes a new one)")
    return None


def open_private_dir(path: str, what: str, *, create: bool = True) -> tuple[int, bool]:
    """(descriptor of ``path``, created). Created with mode 0700 exactly when
    missing and ``create`` (missing parents get the usual mode). UnsafePath when
    another user owns it, group or others can write into it, or it is a link;
    FileNotFoundError when it is missing and not ``create``; NotADirectoryError
    when it is a file; another OSError when it cannot be made or opened."""
    created = False
    path = path.rstrip("/") or "/"       # a trailing slash makes the kernel follow a link: O_NOFOLLOW would not see it
    if create:
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        try:
            os.mkdir(path, DIR_MODE)
            created = True
        except FileExistsError:
            pass
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError as exc:
        # Linux answers ENOTDIR for a link under O_DIRECTORY | O_NOFOLLOW, ELOOP elsewhere
        if exc.errno in (errno.ENOTDIR, errno.ELOOP, errno.EMLINK) and os.path.islink(path):
            raise UnsafePath(f"{what} {path!r} is a symbolic link: the worker does not follow one there, "
                             f"since another local user could point it elsewhere; set {what} to the directory "
                             f"itself ({os.path.realpath(path)!r} today) or remove the link") from None
        if exc.errno == errno.ENOTDIR:
            raise NotADirectoryError(f"{what} {path!r} exists and is not a directory") from None
        raise
    try:
        st = os.fstat(fd)
        if created and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != DIR_MODE:
            os.fchmod(fd, DIR_MODE)              # mkdir applied the umask; make the mode exact (of ours only)
            st = os.fstat(fd)
        if problem := dir_problem(st, path, what):
            raise UnsafePath(problem)
    except BaseException:
        os.close(fd)
        raise
    return fd, created


def open_private_file(dir_fd: int, name: str, path: str) -> int:
    """A read descriptor of the existing file ``name`` in the open directory
    ``dir_fd`` (``path`` names it in messages), not followed if a link, checked
    on the descriptor; a looser mode of the worker's own file is tightened to 0600.
    FileNotFoundError when it is missing."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise UnsafePath(f"{path!r} is not a regular file (a symbolic link): another local user could point "
                             "it elsewhere; remove it and start again (the worker writes a new one)") from None
        raise
    try:
        st = os.fstat(fd)
        if problem := file_problem(st, path):
            raise UnsafePath(problem)
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_private_file(dir_fd: int, name: str) -> int:
    """A write descriptor of the new file ``name`` (mode 0600 exactly) in the open
    directory ``dir_fd``; FileExistsError when the name is taken (a link included)."""
    fd = os.open(name, _CREATE_FLAGS, FILE_MODE, dir_fd=dir_fd)
    try:
        os.fchmod(fd, FILE_MODE)                 # whatever the umask
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes of the open file ``fd`` (closed after)."""
    chunks, n = [], 0
    with os.fdopen(fd, "rb", closefd=True) as f:
        while n < limit:
            b = f.read(limit - n)
            if not b:
                break
            chunks.append(b)
            n += len(b)
    return b"".join(chunks)
