cimport cython

from blockx._fast.dispatchloop cimport CallContext


@cython.final
cdef class SubcallBinder:
    cdef public dict parked     # PendingBindSubcalls, all tasks
    cdef long long _seq
    cdef object _calls
    cdef dict _by_id            # the CallTable's by_id (never rebound)
    cdef object _tasks
    cdef object _exec
    cdef object _cache_key
    cdef bint _c_key
    cdef int _max_depth

    cdef object _not_active(self, parent_call_id)
    cdef bint _try_bind(self, CallContext child, list out) except -1
