"""The Worker's side of span export: task records (otel_spans.py) batched to the
exporter process (otel_exporter.py) over its stdin.

Nothing here waits: a record is appended to a list, the list goes out as one
JSON line when it holds MAX_BATCH records or FLUSH_S after its first one, and
the pipe's transport buffers what the process has not read yet. When that
buffer passes MAX_BUFFERED_BYTES (the process is slower than the Worker, or
stuck) or the process is gone, batches are dropped and counted in ``dropped``
(logged once), as the SDK's own batch processor drops past its queue."""
from __future__ import annotations

import asyncio
import logging
import sys

import orjson

log = logging.getLogger("blockx.otel")
FLUSH_S = 0.2
MAX_BATCH = 512
MAX_BUFFERED_BYTES = 16 * 1024 * 1024
STOP_TIMEOUT_S = 15.0


class ExporterPipe:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self._loop = asyncio.get_running_loop()
        self._batch: list = []
        self._timer: asyncio.TimerHandle | None = None
        self.sent = 0
        self.dropped = 0
        self._warned = False

    @classmethod
    async def start(cls, service: str) -> "ExporterPipe":
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "blockx.adapters.telemetry.otel_exporter", service, stdin=asyncio.subprocess.PIPE)
        return cls(proc)

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
        w = self._proc.stdin
        assert w is not None, "the exporter process is started with a stdin pipe"
        if w.is_closing() or w.transport.get_write_buffer_size() > MAX_BUFFERED_BYTES:
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
        w = self._proc.stdin
        assert w is not None, "the exporter process is started with a stdin pipe"
        try:
            if not w.is_closing():
                await w.drain()
            w.close()
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            await asyncio.wait_for(self._proc.wait(), STOP_TIMEOUT_S)
        except asyncio.TimeoutError:
            log.warning("the OpenTelemetry exporter process did not exit in %.0f s; killing it", STOP_TIMEOUT_S)
            self._proc.kill()
            await self._proc.wait()
