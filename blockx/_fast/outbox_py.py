"""Per-connection write outbox, pure-Python twin of outbox.pyx.

Theory of operation (uvloop's _queue_write idea, Go's outbox of depth 256 with
64-frame coalesced flushes):
- enqueue() appends an encoded frame to a list and, if no flush is pending,
  schedules one with loop.call_soon. Everything enqueued during the current loop
  iteration is therefore written by ONE transport.writelines() in the next one.
- A flush writes at most `max_batch` frames; if more remain it schedules the next
  flush for the following iteration (never two flushes in one iteration).
- While the transport is paused (pause_writing from the protocol), nothing is
  flushed; frames pile up to `depth`, then enqueue() raises OutboxFull (retryable)
  for frames that may be dropped (a HeartbeatAck) instead of blocking the event
  loop.
- push() is enqueue() for frames a full outbox must not refuse: ExecuteCalls,
  whose number per executor the dispatcher already bounds (executorMaxInflight,
  at most the depth). Past `depth` a pushed frame waits behind the others and
  leaves with the later flushes, max_batch per iteration: a burst of more than
  `depth` ExecuteCalls in one iteration is paced, not failed (no attempt spent).
- flush_now() writes at once what the scheduled flush would write (same
  limits), for a caller that answers a peer's batch in slices.
- send() is for frames the caller must know were handed to the transport
  (ResumeCall, CancelCall): it waits for room instead of failing when the outbox
  is full, then resolves once the flush containing its frame called writelines.
  enqueue_notify() is its callback form without a Task: it fails like enqueue()
  when full, and tells a waiter object (set_result / set_exception) instead.
  Waiters are matched by sequence number (frames enqueued so far vs frames
  flushed so far), so the hot enqueue() path carries no per-frame bookkeeping.
- close(exc) drops queued frames and fails every waiter with `exc`; afterwards
  enqueue()/send() raise OutboxClosed. A transport whose writelines() raises
  closes the outbox with that error.
"""

from __future__ import annotations

from collections import deque

from blockx._fast.errors import OutboxClosed, OutboxFull


class Outbox:
    __slots__ = ("_transport", "_loop", "_depth", "_max_batch", "_frames", "_scheduled",
                 "_paused", "_closed", "_close_exc", "_enqueued", "_flushed", "_waiters",
                 "_room_waiters", "flushes", "frames_written")

    def __init__(self, transport, loop, depth: int = 256, max_batch: int = 64) -> None:
        if depth < 1:
            raise ValueError(f"outbox depth must be >= 1, got {depth}")
        if max_batch < 1:
            raise ValueError(f"outbox max_batch must be >= 1, got {max_batch}")
        self._transport = transport
        self._loop = loop
        self._depth = depth
        self._max_batch = max_batch
        self._frames: list = []
        self._scheduled = False
        self._paused = False
        self._closed = False
        self._close_exc: BaseException | None = None
        self._enqueued = 0  # frames ever enqueued
        self._flushed = 0  # frames ever handed to the transport
        self._waiters: deque = deque()  # (seq, future), seq ascending
        self._room_waiters: deque = deque()  # futures waiting for queue room
        self.flushes = 0  # writelines() calls made (for metrics and tests)
        self.frames_written = 0

    def __len__(self) -> int:
        return len(self._frames)

    @property
    def depth(self) -> int:
        return self._depth

    @property
    def max_batch(self) -> int:
        return self._max_batch

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def closed(self) -> bool:
        return self._closed

    def _closed_error(self) -> OutboxClosed:
        exc = OutboxClosed("outbox is closed; the connection is gone")
        exc.__cause__ = self._close_exc
        return exc

    def enqueue(self, frame: bytes) -> None:
        """Queue one encoded frame; never blocks. Raises OutboxFull when `depth`
        frames are already queued, OutboxClosed after close()."""
        if self._closed:
            raise self._closed_error()
        frames = self._frames
        if len(frames) >= self._depth:
            raise OutboxFull(
                f"outbox full: {len(frames)} frames queued (depth {self._depth})"
                + (" while the transport is paused" if self._paused else ""))
        frames.append(frame)
        self._enqueued += 1
        if not self._scheduled and not self._paused:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def push(self, frame: bytes) -> None:
        """Queue one encoded frame that a full outbox must not refuse (an
        ExecuteCall: the dispatcher already bounds the calls one executor
        holds); never blocks. Past `depth` it waits behind the frames queued
        before it and leaves with the later flushes, max_batch per iteration:
        a burst is paced instead of failed. Raises OutboxClosed after close()."""
        if self._closed:
            raise self._closed_error()
        self._frames.append(frame)
        self._enqueued += 1
        if not self._scheduled and not self._paused:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def enqueue_notify(self, frame: bytes, waiter) -> None:
        """enqueue(frame) (same errors, nothing queued on error), then
        waiter.set_result(None) once the flush holding the frame called
        writelines(), or waiter.set_exception(exc) if the outbox closes first.
        `waiter` is a Future or any object with done() / set_result() /
        set_exception(): a callback instead of an awaiting Task."""
        self.enqueue(frame)
        self._waiters.append((self._enqueued, waiter))

    async def send(self, frame: bytes) -> None:
        """Queue `frame` (waiting for room if the outbox is full) and return once
        it was handed to transport.writelines(). Raises the close() error if the
        outbox is closed before that."""
        while len(self._frames) >= self._depth and not self._closed:
            fut = self._loop.create_future()
            self._room_waiters.append(fut)
            await fut
        self.enqueue(frame)
        fut = self._loop.create_future()
        self._waiters.append((self._enqueued, fut))
        await fut

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._frames and not self._scheduled and not self._closed:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        self._write()

    def flush_now(self) -> None:
        """Write what is queued now, as the scheduled flush would (at most
        max_batch frames; the rest stays for the next iteration), rather than
        at the next iteration: for a caller that answers a peer's frames in
        slices, so that each slice's answers leave before the next slice is
        handled. A flush already scheduled still runs and writes only what was
        queued since. Nothing while paused or closed."""
        self._write()

    def _write(self) -> None:
        if self._paused or self._closed:
            return
        frames = self._frames
        n = len(frames)
        if n == 0:
            return
        mb = self._max_batch
        if n <= mb:
            batch = frames
            self._frames = []
        else:
            batch = frames[:mb]
            del frames[:mb]
            n = mb
        try:
            self._transport.writelines(batch)
        except Exception as exc:  # the transport is unusable: fail everyone
            self.close(exc)
            return
        self.flushes += 1
        self.frames_written += n
        self._flushed += n
        waiters = self._waiters
        if waiters:
            flushed = self._flushed
            while waiters and waiters[0][0] <= flushed:
                fut = waiters.popleft()[1]
                if not fut.done():
                    fut.set_result(None)
        room = self._room_waiters
        while room and n:
            fut = room.popleft()
            if not fut.done():
                fut.set_result(None)
                n -= 1
        if self._frames and not self._paused and not self._closed and not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def close(self, exc: BaseException | None = None) -> None:
        """Drop queued frames and fail all waiters with `exc` (default OutboxClosed).
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        if exc is None:
            exc = OutboxClosed("outbox closed before the frame was written")
        self._close_exc = exc
        self._frames = []
        waiters = self._waiters
        self._waiters = deque()
        for _, fut in waiters:
            if not fut.done():
                fut.set_exception(exc)
        room = self._room_waiters
        self._room_waiters = deque()
        for fut in room:
            if not fut.done():
                fut.set_exception(exc)


__all__ = ["Outbox"]
