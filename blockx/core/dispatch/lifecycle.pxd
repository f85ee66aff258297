# The C declarations of lifecycle.py (Cython's pure-Python mode): the lifecycle as
# a cdef class with its internal steps as C methods, and the hot paths it calls
# in C (cimported here, so the compiled form never calls a Python collaborator
# for them).
cimport cython

from blockx._fast.readyqueue cimport (ReadyQueue, ready_len, ready_peek, ready_pop, ready_push,
                                      ready_push_front)
from blockx._fast.scoring cimport ExecutorView, select_index
from blockx.core.dispatch.commands cimport new_bind_call, new_dispatch_call, new_unbind_call
from blockx.core.dispatch.fairness cimport TaskScheduler
from blockx.core.dispatch.records cimport (_DONE, _READY, _RUNNING, _WAITING, Batch, CallRecord,
                                           ExecutorRecord, TaskCalls, _join, _take, set_state)


@cython.final
cdef class CallLifecycle:
    cdef public dict by_id
    cdef public object tasks
    cdef public TaskScheduler sched
    cdef public object ex
    cdef public object subcalls
    cdef public object retry
    cdef public object deadline
    cdef public object max_output
    cdef public object on_terminal

    cdef int _bind_failed(self, CallRecord call, now, list out) except -1
    cdef int _cancel_subtree(self, CallRecord parent, reason, list out) except -1
    cdef int _attempt_failed(self, CallRecord call, kind, bint retryable, message, budget_used_ms,
                             now, list out) except -1
    cdef int _drain(self, TaskCalls task, list out) except -1
    cdef int _set_terminal(self, CallRecord call, bint ok, object output, object kind,
                           object message, object retryable, object budget_used_ms,
                           bint counted, list out, bint notify) except -1
    cdef int _settle_waiters(self, CallRecord call, bint ok, object output, object kind,
                             object message, object retryable, bint counted,
                             list out) except -1
    cdef int _release_subcall_waiters(self, CallRecord call, list out) except -1
    cdef int _hand_off(self, CallRecord leader, list moved, list out) except -1
