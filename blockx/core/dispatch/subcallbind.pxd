cimport cython

from blockx._fast.scoring cimport ExecutorView
from blockx._fast.cachekey cimport cache_key_c
from blockx.core.dispatch.callcmds cimport new_bind_call
from blockx.core.dispatch.dispatchloop cimport CallRecord, ExecutorRecord, TaskCalls


cdef bint _waits_on(CallRecord leader, CallRecord child) except -1


@cython.final
cdef class SubcallBinder:
    cdef public dict parked     # subcalls waiting to bind, all tasks
    cdef long long _seq
    cdef dict _by_id            # the CallTable's by_id (never rebound)
    cdef object _exec
    cdef int _max_depth

    cdef object _not_active(self, parent_call_id)
    cdef bint _try_bind(self, CallRecord child, list out) except -1
