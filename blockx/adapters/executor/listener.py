"""The Worker's Unix listening socket for executors, set up safely.

Rules:
- The socket's directory must be private to the Worker's user: it is created
  with mode 0700 when missing; an existing directory owned by someone else or
  open to group/others is refused (we never chmod a directory we did not
  create: it may be /tmp or a home directory). A symlink in its place is
  refused too: whoever controls the link controls where the socket lands.
- The socket is bound, chmod'ed to 0600, and only then listens, so no peer can
  connect before the mode is tight.
- A leftover socket file from a dead Worker is removed (nobody accepts on it);
  a socket someone still listens on, or a non-socket file, is an error.
- On close the file is unlinked only if it is still the inode we bound, so a
  newer Worker's socket at the same path is never removed."""

from __future__ import annotations

import errno
import os
import socket
import stat

from .errors import SocketPathError

# sockaddr_un.sun_path is 108 bytes on Linux, including the terminating NUL.
MAX_SOCKET_PATH_BYTES = 107


def ensure_private_dir(directory: str) -> None:
    try:
        os.makedirs(directory, mode=0o700)
    except FileExistsError:
        pass
    else:
        os.chmod(directory, 0o700)  # makedirs applied the umask; make the mode exact
        return
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise SocketPathError(
            errno.ENOTDIR,
            f"executor socket directory {directory!r} is not a directory (a symlink is not accepted)")
    if st.st_uid != os.geteuid():
        raise SocketPathError(
            errno.EPERM,
            f"executor socket directory {directory!r} is owned by uid {st.st_uid}, not by this "
            f"Worker's uid {os.geteuid()}; use a directory of your own")
    if st.st_mode & 0o077:
        raise SocketPathError(
            errno.EPERM,
            f"executor socket directory {directory!r} has mode {stat.S_IMODE(st.st_mode):04o}: "
            "other users could reach the executor socket; use a private directory (mode 0700), "
            "e.g. a fresh subdirectory that the Worker creates itself")


def _remove_stale_socket(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketPathError(errno.EEXIST, f"executor socket path {path!r} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        pass  # nobody listens: a leftover from a Worker that died
    except BlockingIOError:
        raise SocketPathError(errno.EADDRINUSE, f"another process is listening on {path!r}") from None
    else:
        raise SocketPathError(errno.EADDRINUSE, f"another process is listening on {path!r}")
    finally:
        probe.close()
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def private_socket_path(socket_path: str, executor_id: str) -> str:
    """Where the private listening socket of `executor_id` lives: beside the
    shared socket, in the same private directory (`worker.sock` ->
    `worker.exec-0.sock`). A sandbox gets this one file bound read-only."""
    base, ext = os.path.splitext(os.path.abspath(socket_path))
    return f"{base}.{executor_id}{ext or '.sock'}"


def bind_listener(path: str, backlog: int = 128) -> tuple[socket.socket, tuple[int, int]]:
    """A non-blocking listening AF_UNIX socket at `path` (mode 0600 in a 0700
    directory) and the (st_dev, st_ino) identity of its file."""
    if not path:
        raise SocketPathError(errno.EINVAL, "executor socket path is empty")
    path = os.path.abspath(path)
    if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
        raise SocketPathError(
            errno.ENAMETOOLONG,
            f"executor socket path {path!r} is {len(os.fsencode(path))} bytes; Unix sockets allow "
            f"at most {MAX_SOCKET_PATH_BYTES}: choose a shorter directory")
    ensure_private_dir(os.path.dirname(path))
    _remove_stale_socket(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(backlog)
        sock.setblocking(False)
        st = os.stat(path)
    except BaseException:
        sock.close()
        raise
    return sock, (st.st_dev, st.st_ino)


def unlink_if_ours(path: str, identity: tuple[int, int] | None) -> bool:
    if identity is None:
        return False
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if (st.st_dev, st.st_ino) != identity:
        return False
    os.unlink(path)
    return True
