cimport cython


@cython.final
@cython.no_gc
cdef class TraceBuffer:
    cdef public str task_id
    cdef public Py_ssize_t limit
    cdef public long long sample_every
    cdef public long long dropped
    cdef public long long truncated
    cdef public bint ended
    cdef public long long retained_weight   # its weight in the store's retained budget, once ended
    cdef Py_ssize_t _root_from
    cdef str _prefix
    cdef long long* _rows        # n rows of ROW int64, malloc'd: no Python object per event
    cdef Py_ssize_t _n
    cdef Py_ssize_t _cap
    cdef object _strings         # list while recording; a tuple once sealed (trim)
    cdef object _string_ix       # dict while recording; None once sealed
    cdef object _extras          # list while recording; a tuple once sealed

    cdef int _unseal(self) except -1
    cdef long long str_c(self, object s) except -1
    cdef long long key_c(self, str call_id) except? -3
    cdef str call_str(self, long long key)
    cdef bint keeps_c(self, str call_id) except -1
    cdef bint keeps_row_c(self, Py_ssize_t r) except -1
    cdef int append_c(self, long long kind, long long t, long long a, long long b, long long c, long long d,
                      long long e) except -1
    cdef int compact_c(self) except -1


@cython.final
cdef class CallRecorder:
    cdef public dict tasks
    cdef public long long now_us

    cdef TraceBuffer _recording(self, object task_id, str call_id)
