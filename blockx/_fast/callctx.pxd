cimport cython


@cython.final
cdef class CallContext:
    cdef public object call_id
    cdef public object task
    cdef public Py_ssize_t index
    cdef public Py_ssize_t batch_idx
    cdef public object function_id
    cdef public object digest
    cdef public object entry_selector
    cdef public object args_json
    cdef public object key
    cdef public int state
    cdef public object executor_id
    cdef public object exec
    cdef public bint bound
    cdef public long long attempt_count
    cdef public object budget_ms
    cdef public object parent
    cdef public int depth
    cdef public object request_id
    cdef public object children
    cdef public object waiters
    cdef public object leader
    cdef public bint retry_armed
    cdef public bint parked
    cdef public bint ok
    cdef public object output
    cdef public object error_kind
    cdef public object error_message
    cdef public object retryable
    cdef public object budget_used_ms
