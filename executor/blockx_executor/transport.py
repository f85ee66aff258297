"""The executor's end of the Worker's Unix socket.

One socket, two writers: the scheduler (main thread) queues encoded frames and
flushes them once per scheduler pass; the heartbeat thread sends its frame and,
under the same lock, flushes whatever the scheduler queued, so frames produced
just before a call that spins in user code still leave within one heartbeat
interval. The queue is a deque (append / popleft are atomic), so the scheduler
never takes the lock to queue. The main thread alone reads, after poll() says
the socket is readable, so recv never blocks.

A send that makes no progress for SEND_TIMEOUT_S means the Worker stopped
reading: it is reported as a lost connection rather than hanging forever.

The socket is non-blocking and the timeout is kept here, not by the socket:
a socket with a timeout makes CPython poll() before every send and recv,
and a fresh 256 KiB bytes object per recv costs an mmap, an mremap and a
munmap. Both were measurable per scheduler pass (strace: 8 syscalls per pass
where 3 do: the loop's poll, one recv_into a buffer kept for the connection,
one send)."""

from __future__ import annotations

import errno
import select
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
    def __init__(self, sock: socket.socket, send_timeout_s: float = SEND_TIMEOUT_S):
        sock.setblocking(False)
        self.sock = sock
        self.send_timeout_s = send_timeout_s
        self._rbuf = bytearray(RECV_BYTES)
        self._rview = memoryview(self._rbuf)
        self._lock = threading.Lock()
        self._queue: deque[bytes] = deque()
        # queue(frame): add an encoded frame to the next flush; the deque's own
        # append (atomic, and no Python frame per call on the per-call path).
        self.queue = self._queue.append
        self.closed = False
        self._closed_by: ConnectionClosed | None = None

    def fileno(self) -> int:
        return self.sock.fileno()

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
            self._send_all(data)
        except socket.timeout:
            err = ConnectionClosed(
                f"the worker read nothing for {self.send_timeout_s:g} s; giving up on it",
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

    def _send_all(self, data: bytes) -> None:
        """Send all of `data` on the non-blocking socket; while the Worker's
        side is full, wait for room, and raise socket.timeout when none came
        for send_timeout_s."""
        sock = self.sock
        try:
            sent = sock.send(data)
        except BlockingIOError:
            sent = 0
        if sent == len(data):
            return
        view = memoryview(data)[sent:]
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLOUT)
        timeout_ms = max(1, int(self.send_timeout_s * 1000))
        while view:
            if not poller.poll(timeout_ms):
                raise socket.timeout("send timed out")
            try:
                sent = sock.send(view)
            except BlockingIOError:
                continue
            view = view[sent:]

    def recv(self) -> bytes | None:
        """Bytes available now; b"" when the Worker closed the connection, None
        on a spurious wakeup (nothing to read after all)."""
        try:
            n = self.sock.recv_into(self._rbuf)
        except (ConnectionResetError, BrokenPipeError):
            return b""
        except (BlockingIOError, InterruptedError):
            return None
        return bytes(self._rview[:n]) if n else b""

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass
