cimport cython


@cython.final
cdef class ExecutorView:
    cdef public str executor_id
    cdef public bint healthy
    cdef public long long runnable            # heartbeat runnable, compensated by the dispatcher
    cdef public long long local_inflight      # calls this worker has bound to the executor
    cdef public long long usable_contexts
    cdef public long long memory_bytes
    cdef public long long last_scheduler_active_at_ms
    cdef public str running_call_id           # "" = none
    cdef public long long heartbeat_seq


# The C entry point of select_executor, for the compiled dispatch loop (its
# views are this module's ExecutorViews, in a list; the scan starts at start).
cdef Py_ssize_t select_index(list views, long long now_ms, Py_ssize_t sample_size,
                             long long max_runnable, long long max_inflight,
                             long long memory_high_watermark,
                             long long stall_timeout_ms, Py_ssize_t start=*) except -2
