# The C declarations of subcalls.py (Cython's pure-Python mode): the binder as a
# cdef class, and the records and hot paths it uses in C.
cimport cython

from blockx._fast.scoring cimport ExecutorView
from blockx._fast.cachekey cimport cache_key_c
from blockx.core.dispatch.commands cimport new_bind_call
from blockx.core.dispatch.records cimport (_READY as READY, _RUNNING as RUNNING,
                                           _WAITING as WAITING, CallRecord, ExecutorRecord,
                                           TaskCalls, set_state)


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
