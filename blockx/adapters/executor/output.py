"""ExecutorOutput: what executors write to stdout / stderr, into the Worker's log
as data, never as lines of its own.

An executor runs user code, so every byte it writes is untrusted: a `print()`
of a JSON line must not read as a Worker log record. The pool gives each
executor a pipe for stdout and one for stderr; this object reads them on the
event loop (add_reader, non-blocking reads, no thread, no Task) and logs each
line as one tagged record:

    {"event": "executor_output", "executor": "exec-0", "stream": "stdout",
     "text": "<the line, decoded with backslash escapes, at most line_bytes>",
     "truncated": false, ...}

The JSON encoder escapes quotes and control characters, so the text stays a
field. Bounds, per executor (both streams together):
- a line longer than `line_bytes` is cut there (`truncated`: true); the rest
  of that line is skipped;
- a token bucket of `bytes_per_s` (bursts up to one second of it): a line that
  finds the bucket empty is dropped and counted; at most once a second an
  `executor_output_dropped` record says how many lines and bytes were dropped;
- while dropping, the pipe is not read for PAUSE_S, so a function that prints
  without end is slowed by its own full pipe instead of costing the Worker's
  loop a read per 64 KiB.
An executor's own log lines (JSON on its stderr) arrive the same way: as text."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

__all__ = ["ExecutorOutput", "RECORD_OVERHEAD_BYTES"]

RECORD_OVERHEAD_BYTES = 128   # what a record costs the bucket beyond its text
READ_BYTES = 65536
PAUSE_S = 0.1
REPORT_INTERVAL_S = 1.0


class _Budget:
    """The token bucket and drop counters of one executor (shared by its streams)."""

    __slots__ = ("tokens", "at", "dropped_lines", "dropped_bytes", "reported_at", "report_timer")

    def __init__(self, tokens: float, now: float) -> None:
        self.tokens = tokens
        self.at = now
        self.dropped_lines = 0
        self.dropped_bytes = 0
        self.reported_at = now
        self.report_timer = None    # a later report of drops that came too soon after the last


class _Stream:
    __slots__ = ("executor_id", "name", "fd", "budget", "partial", "skipping", "paused")

    def __init__(self, executor_id: str, name: str, fd: int, budget: _Budget) -> None:
        self.executor_id = executor_id
        self.name = name
        self.fd = fd
        self.budget = budget
        self.partial = bytearray()
        self.skipping = False       # inside a line whose head (line_bytes) was already logged
        self.paused = False


class ExecutorOutput:
    def __init__(self, *, line_bytes: int = 4096, bytes_per_s: int = 65536,
                 logger: logging.Logger | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if type(line_bytes) is not int or line_bytes < 1 or type(bytes_per_s) is not int or bytes_per_s < 1:
            raise ValueError("line_bytes and bytes_per_s must be positive integers")
        self.line_bytes = line_bytes
        self.bytes_per_s = bytes_per_s
        self.log = logger or logging.getLogger("blockx.executor.output")
        self.clock = clock
        self._budgets: dict[str, _Budget] = {}
        self._streams: dict[int, _Stream] = {}
        self._loop: Any = None           # the event loop, from the first watch()
        self.dropped_lines_total = 0

    def watch(self, loop, executor_id: str, name: str, pipe) -> None:
        """Read `pipe` (the parent's end of the executor's `name` stream, a file
        object or a descriptor) until EOF; this object closes it."""
        self._loop = loop
        fd = os.dup(pipe.fileno()) if hasattr(pipe, "fileno") else os.dup(pipe)
        if hasattr(pipe, "close"):
            pipe.close()
        os.set_blocking(fd, False)
        budget = self._budgets.get(executor_id)
        if budget is None:
            budget = self._budgets[executor_id] = _Budget(float(self.bytes_per_s), self.clock())
        stream = self._streams[fd] = _Stream(executor_id, name, fd, budget)
        loop.add_reader(fd, self._readable, stream)

    def close(self) -> None:
        """Log what the pipes still hold (the executors have exited), then close them."""
        for stream in list(self._streams.values()):
            for _ in range(64):
                if stream.fd not in self._streams:
                    break
                try:
                    data = os.read(stream.fd, READ_BYTES)
                except OSError:
                    break
                self._feed(stream, data) if data else self._readable(stream)
            self._finish(stream)

    # ---- reading ----
    def _readable(self, stream: _Stream) -> None:
        try:
            data = os.read(stream.fd, READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            if stream.partial:
                self._line(stream, bytes(stream.partial), False)
                stream.partial.clear()
            self._finish(stream)
            return
        self._feed(stream, data)
        self._report_drops(stream)
        if stream.budget.dropped_lines and stream.budget.tokens <= 0 and not stream.paused:
            stream.paused = True
            self._loop.remove_reader(stream.fd)
            self._loop.call_later(PAUSE_S, self._resume, stream)

    def _resume(self, stream: _Stream) -> None:
        stream.paused = False
        if stream.fd in self._streams:
            self._loop.add_reader(stream.fd, self._readable, stream)

    def _finish(self, stream: _Stream) -> None:
        if self._streams.pop(stream.fd, None) is None:
            return
        if not stream.paused and self._loop is not None:
            try:
                self._loop.remove_reader(stream.fd)
            except Exception:  # noqa: BLE001 - the loop may be closing
                pass
        os.close(stream.fd)
        self._report_drops(stream, force=True)

    def _feed(self, stream: _Stream, data: bytes) -> None:
        limit = self.line_bytes
        partial = stream.partial
        start, n = 0, len(data)
        while start < n:
            nl = data.find(b"\n", start)
            end = n if nl < 0 else nl
            if not stream.skipping:
                room = limit - len(partial)
                if end - start > room:          # an over-long line: its head now, the rest skipped
                    partial += data[start:start + room]
                    self._line(stream, bytes(partial), True)
                    partial.clear()
                    stream.skipping = True
                else:
                    partial += data[start:end]
            if nl < 0:
                return
            if not stream.skipping:
                self._line(stream, bytes(partial), False)
            partial.clear()
            stream.skipping = False
            start = nl + 1

    def _line(self, stream: _Stream, raw: bytes, truncated: bool) -> None:
        budget = stream.budget
        now = self.clock()
        budget.tokens = min(float(self.bytes_per_s), budget.tokens + (now - budget.at) * self.bytes_per_s)
        budget.at = now
        cost = len(raw) + RECORD_OVERHEAD_BYTES
        if budget.tokens < cost:
            budget.dropped_lines += 1
            budget.dropped_bytes += len(raw) + 1
            self.dropped_lines_total += 1
            return
        budget.tokens -= cost
        text = raw.decode("utf-8", "backslashreplace").removesuffix("\r")
        self.log.info("executor output", extra={"event": "executor_output", "fields": {
            "executor": stream.executor_id, "stream": stream.name, "text": text, "truncated": truncated}})

    def _report_later(self, stream: _Stream) -> None:
        stream.budget.report_timer = None
        self._report_drops(stream, force=True)

    def _report_drops(self, stream: _Stream, force: bool = False) -> None:
        budget = stream.budget
        if not budget.dropped_lines:
            return
        now = self.clock()
        if not force and now - budget.reported_at < REPORT_INTERVAL_S:
            if budget.report_timer is None and self._loop is not None:
                budget.report_timer = self._loop.call_later(
                    REPORT_INTERVAL_S - (now - budget.reported_at), self._report_later, stream)
            return
        if budget.report_timer is not None:
            budget.report_timer.cancel()
            budget.report_timer = None
        self.log.warning("executor output dropped over the rate limit",
                         extra={"event": "executor_output_dropped",
                                "fields": {"executor": stream.executor_id, "lines": budget.dropped_lines,
                                           "bytes": budget.dropped_bytes, "bytes_per_s": self.bytes_per_s}})
        budget.dropped_lines = 0
        budget.dropped_bytes = 0
        budget.reported_at = now
