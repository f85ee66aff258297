"""The Worker's side of span export: task records (otel_spans.py) batched to the
exporter process (otel_exporter.py) over its stdin.

Nothing here waits: a record is appended to a list, the list goes out as one
JSON line when it holds MAX_BATCH records or FLUSH_S after its first one, and
the pipe's transport buffers what the process has not read yet. When that
buffer passes MAX_BUFFERED_BYTES (the process is slower than the Worker, or
stuck) or the process is gone, batches are dropped and counted in ``dropped``
(logged once), as the SDK's own batch processor drops past its queue.

The process is started as the executors are (adapters/executor/spawn.py: Popen, vfork and
exec), not with the loop's own subprocess support: uvloop's forks and runs the
interpreter's after-fork hooks in the child before exec, which can hang on a lock
another thread of the Worker held at the fork, and the loop with it."""
from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys

import orjson

from blockx.adapters.executor.spawn import ChildProcess

log = logging.getLogger("blockx.otel")
FLUSH_S = 0.2
MAX_BATCH = 512
MAX_BUFFERED_BYTES = 16 * 1024 * 1024
STOP_TIMEOUT_S = 15.0


class _InputPipe(asyncio.Protocol):
    """The write end of the process's stdin: the transport's flow control, so close()
    can wait for what is buffered to be written."""

    def __init__(self) -> None:
        self._paused = False
        self._lost = False
        self._resumed: asyncio.Future | None = None

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._wake()

    def _wake(self) -> None:
        if self._resumed is not None and not self._resumed.done():
            self._resumed.set_result(None)
        self._resumed = None

    async def drain(self) -> None:
        while self._paused and not self._lost:
            self._resumed = asyncio.get_running_loop().create_future()
            await self._resumed


class ExporterPipe:
    def __init__(self, proc: ChildProcess, stdin: asyncio.WriteTransport, flow: _InputPipe) -> None:
        self._proc = proc
        self._stdin = stdin
        self._flow = flow
        self._loop = asyncio.get_running_loop()
        self._batch: list = []
        self._timer: asyncio.TimerHandle | None = None
        self.sent = 0
        self.dropped = 0
        self._warned = False

    @classmethod
    async def start(cls, service: str) -> "ExporterPipe":
        loop = asyncio.get_running_loop()
        proc = ChildProcess([sys.executable, "-m", "blockx.adapters.telemetry.otel_exporter", service], os.environ,
                            loop=loop, stdin=subprocess.PIPE)
        assert proc.popen.stdin is not None, "started with a stdin pipe"
        stdin, flow = await loop.connect_write_pipe(_InputPipe, proc.popen.stdin)
        return cls(proc, stdin, flow)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def __call__(self, record: list) -> None:
        batch = self._batch
        batch.append(record)
        if len(batch) >= MAX_BATCH:
            self.flush()
        elif self._timer is None:
            self._timer = self._loop.call_later(FLUSH_S, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._batch = self._batch, []
        if not batch:
            return
        w = self._stdin
        if w.is_closing() or w.get_write_buffer_size() > MAX_BUFFERED_BYTES:
            self.dropped += len(batch)
            if not self._warned:
                self._warned = True
                log.warning("OpenTelemetry spans dropped: the exporter process %s (pid %d); counting on",
                            "is gone" if w.is_closing() else "falls behind", self._proc.pid)
            return
        w.write(orjson.dumps(batch) + b"\n")
        self.sent += len(batch)

    async def close(self) -> None:
        """Send what is batched, end the process's input and wait for it to flush
        and exit (killed after STOP_TIMEOUT_S)."""
        self.flush()
        w = self._stdin
        try:
            if not w.is_closing():
                await self._flow.drain()
            w.close()
        except (BrokenPipeError, ConnectionResetError):
            pass
        if await self._proc.wait(STOP_TIMEOUT_S) is None:
            log.warning("the OpenTelemetry exporter process did not exit in %.0f s; killing it", STOP_TIMEOUT_S)
            self._proc.kill()
            await self._proc.wait()
