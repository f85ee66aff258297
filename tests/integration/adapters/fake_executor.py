"""A fake executor for adapter tests: a real Unix-socket client speaking the
frame codec, driven step by step by the test (no call execution of its own),
and a handler that records the adapter's callbacks. Every wait is bounded."""

from __future__ import annotations

import asyncio
import os
import struct

from blockx._fast import load
from blockx.protocol import messages as m

codec = load("codec")

WAIT_S = 3.0


async def wait_until(predicate, timeout: float = WAIT_S, what: str = "condition"):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.005)


class FakeExecutor:
    def __init__(self, socket_path: str, executor_id: str, *, contexts: int = 4, secret: str = "") -> None:
        self.socket_path = socket_path
        self.secret = secret        # sent in the first Heartbeat (the attach), as a real executor does
        self.executor_id = executor_id
        self.contexts = contexts
        self.inflight = 0
        self.seq = 0
        self.received: list[tuple[dict, bytes | None]] = []
        self.eof = False
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task | None = None
        self._decoder = codec.FrameDecoder()

    async def connect(self) -> "FakeExecutor":
        self.reader, self.writer = await asyncio.wait_for(
            asyncio.open_unix_connection(self.socket_path), WAIT_S)
        self._task = asyncio.get_running_loop().create_task(self._read())
        return self

    async def _read(self) -> None:
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                self.received.extend(self._decoder.feed(data))
        except (ConnectionError, OSError):
            pass
        finally:
            self.eof = True

    # ---- sending ----
    def send(self, *envelopes: dict, sidecar: bytes | None = None) -> None:
        """All envelopes in ONE write (so the adapter sees them in one chunk)."""
        self.writer.write(codec.encode_frames([(e, sidecar) for e in envelopes]))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    def heartbeat_envelope(self, **fields) -> dict:
        self.seq += 1
        hb = m.heartbeat(self.executor_id, os.getpid(), self.seq, 0, self.inflight,
                         self.contexts - self.inflight, 1 << 20, 0)
        if self.secret and self.seq == 1:
            hb["payload"]["attachSecret"] = self.secret
        hb["payload"].update(fields)
        return hb

    def heartbeat(self, **fields) -> None:
        self.send(self.heartbeat_envelope(**fields))

    def complete(self, call_id: str, attempt_seq: int = 1, output=None, task_id: str = "t1") -> dict:
        return m.call_completed(call_id, task_id, attempt_seq, output, 1)

    # ---- receiving ----
    def of_type(self, message_type: str) -> list[tuple[dict, bytes | None]]:
        return [f for f in self.received if f[0]["messageType"] == message_type]

    async def wait_frames(self, message_type: str, count: int = 1, timeout: float = WAIT_S):
        await wait_until(lambda: len(self.of_type(message_type)) >= count, timeout,
                         f"{count} {message_type} frame(s) at {self.executor_id}")
        return self.of_type(message_type)

    async def wait_eof(self, timeout: float = WAIT_S) -> None:
        await wait_until(lambda: self.eof, timeout, f"EOF at {self.executor_id}")

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await asyncio.wait_for(self.writer.wait_closed(), WAIT_S)
            except (ConnectionError, OSError, asyncio.TimeoutError):
                pass
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass


def length_prefix(n: int) -> bytes:
    return struct.pack(">I", n)


class RecordingHandler:
    """Records on_executor_* callbacks; `hook` (if set) runs inside on_executor_frames."""

    def __init__(self) -> None:
        self.attached: list[str] = []
        self.lost: list[tuple[str, str]] = []
        self.batches: list[tuple[str, list]] = []
        self.hook = None

    def on_executor_attached(self, executor_id: str) -> None:
        self.attached.append(executor_id)

    def on_executor_frames(self, executor_id: str, frames: list) -> None:
        self.batches.append((executor_id, frames))
        if self.hook is not None:
            self.hook(executor_id, frames)

    def on_executor_lost(self, executor_id: str, reason: str) -> None:
        self.lost.append((executor_id, reason))

    def frames_of(self, executor_id: str) -> list:
        return [f for eid, batch in self.batches if eid == executor_id for f in batch]

    async def wait_attached(self, executor_id: str, count: int = 1) -> None:
        await wait_until(lambda: self.attached.count(executor_id) >= count,
                         what=f"{executor_id} attached")

    async def wait_lost(self, executor_id: str, count: int = 1) -> str:
        await wait_until(lambda: sum(1 for e, _ in self.lost if e == executor_id) >= count,
                         what=f"{executor_id} lost")
        return [r for e, r in self.lost if e == executor_id][count - 1]

    async def wait_frames(self, executor_id: str, count: int = 1) -> list:
        await wait_until(lambda: len(self.frames_of(executor_id)) >= count,
                         what=f"{count} frame(s) from {executor_id}")
        return self.frames_of(executor_id)
