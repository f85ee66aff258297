"""The executor's end of the Worker's Unix socket.

One socket, two writers: the scheduler (main thread) queues encoded frames and
flushes them once per scheduler pass; the heartbeat thread sends its frame and,
under the same lock, flushes whatever the scheduler queued, so frames produced
just before a call that spins in user code still leave within one heartbeat
interval. The queue is a deque (append / popleft are atomic), so the scheduler
never takes the lock to queue. The main thread alone reads, after poll() says
the socket is readable, so recv never blocks.

A send that makes no progress for SEND_TIMEOUT_S means the Worker stopped
reading: it is reported as a lost connection rather than hanging forever."""

from __future__ import annotations

import errno
import socket
import threading
import time
from collections import deque

SEND_TIMEOUT_S = 30.0
RECV_BYTES = 256 * 1024


class ConnectError(Exception):
    """The Worker's socket cannot be reached."""


class ConnectionClosed(Exception):
    """The Worker closed the socket (`clean`), or stopped reading from it."""

    def __init__(self, message: str, clean: bool = True):
        super().__init__(message)
        self.clean = clean


def connect(path: str, timeout_ms: int) -> socket.socket:
    """Connect to the Unix socket at `path`, retrying ENOENT / ECONNREFUSED (the
    Worker may still be binding it) until `timeout_ms` has passed."""
    deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
    delay = 0.02
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError as exc:
            sock.close()
            transient = exc.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN)
            if not transient or time.monotonic() + delay > deadline:
                raise ConnectError(
                    f"cannot connect to the worker socket {path!r}: {exc.strerror or exc}"
                    + (f" (retried for {timeout_ms} ms)" if transient and timeout_ms > 0 else "")
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
            continue
        sock.settimeout(SEND_TIMEOUT_S)
        return sock


class Connection:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._lock = threading.Lock()
        self._queue: deque[bytes] = deque()
        self.closed = False
        self._closed_by: ConnectionClosed | None = None

    def fileno(self) -> int:
        return self.sock.fileno()

    def queue(self, frame: bytes) -> None:
        self._queue.append(frame)

    def pending(self) -> int:
        return len(self._queue)

    def flush(self) -> None:
        if self._queue:
            with self._lock:
                self._send_locked(None)

    def send_now(self, frame: bytes) -> None:
        """Send `frame` after everything already queued (any thread)."""
        with self._lock:
            self._send_locked(frame)

    def _send_locked(self, extra: bytes | None) -> None:
        if self.closed:
            first = self._closed_by
            raise ConnectionClosed(str(first) if first else "the worker connection is closed",
                                   first.clean if first else True)
        q = self._queue
        parts = []
        try:
            while True:
                parts.append(q.popleft())
        except IndexError:
            pass
        if extra is not None:
            parts.append(extra)
        if not parts:
            return
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        try:
            self.sock.sendall(data)
        except socket.timeout:
            err = ConnectionClosed(
                f"the worker read nothing for {SEND_TIMEOUT_S:.0f} s; giving up on it",
                clean=False)
        except (BrokenPipeError, ConnectionResetError) as exc:
            err = ConnectionClosed(f"the worker closed the socket: {exc}")
        except OSError as exc:
            err = ConnectionClosed(f"sending to the worker failed: {exc}", clean=False)
        else:
            return
        self.closed = True
        self._closed_by = err
        raise err

    def recv(self) -> bytes | None:
        """Bytes available now; b"" when the Worker closed the connection, None
        on a spurious wakeup (nothing to read after all)."""
        try:
            return self.sock.recv(RECV_BYTES)
        except (ConnectionResetError, BrokenPipeError):
            return b""
        except (BlockingIOError, socket.timeout):
            return None

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass
