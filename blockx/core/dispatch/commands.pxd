# The C declarations of commands.py (Cython's pure-Python mode): the per-call
# commands as cdef classes and their C constructors, for the compiled loop; the
# other commands stay dataclasses in both forms.
cimport cython


@cython.final
@cython.no_gc
@cython.freelist(64)
cdef class BindCall:
    cdef public object call_id
    cdef public object executor_id
    cdef public object task_id
    cdef public object is_subcall
    cdef public object parent_call_id


@cython.final
@cython.no_gc
@cython.freelist(64)
cdef class UnbindCall:
    cdef public object call_id
    cdef public object executor_id


@cython.final
@cython.no_gc
@cython.freelist(64)
cdef class DispatchCallCmd:
    cdef public object call_id
    cdef public object executor_id
    cdef public object task_id
    cdef public object function_id
    cdef public object digest
    cdef public object entry_selector
    cdef public object args_json
    cdef public object budget_ms
    cdef public object attempt_seq
    cdef public object parent_call_id


cpdef BindCall new_bind_call(object call_id, object executor_id, object task_id, object is_subcall,
                            object parent_call_id)
cpdef UnbindCall new_unbind_call(object call_id, object executor_id)
cpdef DispatchCallCmd new_dispatch_call(object call_id, object executor_id, object task_id,
                                       object function_id, object digest, object entry_selector,
                                       object args_json, object budget_ms, object attempt_seq,
                                       object parent_call_id)
