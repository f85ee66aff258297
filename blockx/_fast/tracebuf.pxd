cimport cython


@cython.final
cdef class TaskTrace:
    cdef public str task_id
    cdef public list events
    cdef public Py_ssize_t limit
    cdef public long long sample_every
    cdef public long long dropped
    cdef public long long truncated
    cdef public bint ended
    cdef Py_ssize_t _root_from

    cdef bint keeps_c(self, str call_id) except -1
    cdef int compact_c(self) except -1


@cython.final
cdef class CallRecorder:
    cdef public dict tasks
    cdef public long long now_us
