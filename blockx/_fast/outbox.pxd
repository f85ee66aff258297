cimport cython


@cython.final
cdef class Outbox:
    cdef object _transport
    cdef object _loop
    cdef object _call_soon          # loop.call_soon, looked up once
    cdef object _flush_cb           # bound self._flush, created once
    cdef Py_ssize_t _depth
    cdef Py_ssize_t _max_batch
    cdef list _frames
    cdef bint _scheduled
    cdef bint _paused
    cdef bint _closed
    cdef object _close_exc
    cdef long long _enqueued        # frames ever enqueued
    cdef long long _flushed         # frames ever handed to the transport
    cdef object _waiters            # deque of (seq, future), seq ascending
    cdef object _room_waiters       # deque of futures waiting for room
    cdef readonly long long flushes         # writelines() calls made
    cdef readonly long long frames_written

    cpdef enqueue(self, object frame)
    cpdef push(self, object frame)
    cdef int _flush_c(self) except -1
    cdef int _write_c(self) except -1
    cpdef flush_now(self)
    cdef object _closed_error(self)
    cpdef close(self, exc=*)
