# Per-connection write outbox (compiled; twin: outbox_py.py, whose docstring
# holds the theory of operation: list + one call_soon flush per loop iteration,
# <= max_batch frames per transport.writelines(), no flushing while paused,
# OutboxFull at `depth`, push() past it, send() resolved by sequence number
# once flushed).
# The behaviour must match the twin exactly; the parity tests run both.

cimport cython
from cpython.list cimport PyList_GET_SIZE

from collections import deque

from blockx._fast.errors import OutboxClosed, OutboxFull


@cython.final
cdef class Outbox:

    def __cinit__(self, transport, loop, Py_ssize_t depth=256, Py_ssize_t max_batch=64):
        if depth < 1:
            raise ValueError(f"outbox depth must be >= 1, got {depth}")
        if max_batch < 1:
            raise ValueError(f"outbox max_batch must be >= 1, got {max_batch}")
        self._transport = transport
        self._loop = loop
        self._call_soon = loop.call_soon
        self._flush_cb = self._flush
        self._depth = depth
        self._max_batch = max_batch
        self._frames = []
        self._scheduled = False
        self._paused = False
        self._closed = False
        self._close_exc = None
        self._enqueued = 0
        self._flushed = 0
        self._waiters = deque()
        self._room_waiters = deque()
        self.flushes = 0
        self.frames_written = 0

    def __len__(self):
        return PyList_GET_SIZE(self._frames)

    @property
    def depth(self):
        return self._depth

    @property
    def max_batch(self):
        return self._max_batch

    @property
    def paused(self):
        return self._paused

    @property
    def closed(self):
        return self._closed

    cdef object _closed_error(self):
        exc = OutboxClosed("outbox is closed; the connection is gone")
        exc.__cause__ = self._close_exc
        return exc

    cpdef enqueue(self, object frame):
        """Queue one encoded frame; never blocks. Raises OutboxFull when `depth`
        frames are already queued, OutboxClosed after close()."""
        cdef Py_ssize_t n
        if self._closed:
            raise self._closed_error()
        n = PyList_GET_SIZE(self._frames)
        if n >= self._depth:
            raise OutboxFull(
                f"outbox full: {n} frames queued (depth {self._depth})"
                + (" while the transport is paused" if self._paused else ""))
        self._frames.append(frame)
        self._enqueued += 1
        if not self._scheduled and not self._paused:
            self._scheduled = True
            self._call_soon(self._flush_cb)

    cpdef push(self, object frame):
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
            self._call_soon(self._flush_cb)

    def enqueue_notify(self, frame, waiter):
        """enqueue(frame) (same errors, nothing queued on error), then
        waiter.set_result(None) once the flush holding the frame called
        writelines(), or waiter.set_exception(exc) if the outbox closes first.
        `waiter` is a Future or any object with done() / set_result() /
        set_exception(): a callback instead of an awaiting Task."""
        self.enqueue(frame)
        self._waiters.append((self._enqueued, waiter))

    async def send(self, frame):
        """Queue `frame` (waiting for room if the outbox is full) and return once
        it was handed to transport.writelines(). Raises the close() error if the
        outbox is closed before that."""
        while PyList_GET_SIZE(self._frames) >= self._depth and not self._closed:
            fut = self._loop.create_future()
            self._room_waiters.append(fut)
            await fut
        self.enqueue(frame)
        fut = self._loop.create_future()
        self._waiters.append((self._enqueued, fut))
        await fut

    def pause_writing(self):
        self._paused = True

    def resume_writing(self):
        self._paused = False
        if PyList_GET_SIZE(self._frames) and not self._scheduled and not self._closed:
            self._scheduled = True
            self._call_soon(self._flush_cb)

    def _flush(self):
        self._flush_c()

    cpdef flush_now(self):
        """Write what is queued now, as the scheduled flush would (at most
        max_batch frames; the rest stays for the next iteration), rather than
        at the next iteration: for a caller that answers a peer's frames in
        slices, so that each slice's answers leave before the next slice is
        handled. A flush already scheduled still runs and writes only what was
        queued since. Nothing while paused or closed."""
        self._write_c()

    cdef int _flush_c(self) except -1:
        self._scheduled = False
        return self._write_c()

    cdef int _write_c(self) except -1:
        cdef list frames, batch
        cdef Py_ssize_t n, mb
        cdef long long flushed
        if self._paused or self._closed:
            return 0
        frames = self._frames
        n = PyList_GET_SIZE(frames)
        if n == 0:
            return 0
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
            return 0
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
        if PyList_GET_SIZE(self._frames) and not self._paused and not self._closed \
                and not self._scheduled:
            self._scheduled = True
            self._call_soon(self._flush_cb)
        return 0

    cpdef close(self, exc=None):
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
