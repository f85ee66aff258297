cimport cython

from blockx._fast.readyqueue cimport ReadyQueue


@cython.final
cdef class CallRecord:
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


@cython.final
cdef class CallBlock:
    cdef readonly object prefix
    cdef readonly Py_ssize_t batch_idx
    cdef readonly Py_ssize_t n
    cdef readonly Py_ssize_t pos        # read in C as an index into fidx/offs: not writable
    cdef public Py_ssize_t base
    cdef readonly list fns
    cdef readonly object fidx
    cdef readonly bytes args
    cdef readonly object offs
    cdef readonly object cache_key
    cdef public object batch
    cdef bint c_key


@cython.final
cdef class Batch:
    cdef public Py_ssize_t idx
    cdef public object calls
    cdef public Py_ssize_t remaining


@cython.final
cdef class InstanceState:
    cdef public object instance_id
    cdef public object ring
    cdef public Py_ssize_t inflight
    cdef public Py_ssize_t last_served
    cdef public Py_ssize_t tasks


@cython.final
cdef class TaskScheduler:
    cdef bint _fair
    cdef Py_ssize_t _quantum
    cdef Py_ssize_t _window
    cdef dict _instances
    cdef InstanceState _single
    cdef InstanceState _current
    cdef Py_ssize_t _left
    cdef Py_ssize_t _seq

    cdef object next_task_c(self)
    cdef int served_c(self, TaskCalls task) except -1
    cdef int wake_c(self, TaskCalls task) except -1


@cython.final
cdef class TaskCalls:
    cdef public object task_id
    cdef public bint fast_fail
    cdef public object max_attempts
    cdef public object base_backoff_ms
    cdef public object jitter_percent
    cdef public InstanceState instance
    cdef public bint streaming
    cdef public ReadyQueue ready
    cdef public object blocks
    cdef public Py_ssize_t queued
    cdef public Py_ssize_t inflight
    cdef public dict pending
    cdef public Py_ssize_t total
    cdef public list outputs
    cdef public long long output_bytes
    cdef public dict cache
    cdef public dict flights
    cdef public dict batches
    cdef public list settle_ready
    cdef public Py_ssize_t next_batch_idx
    cdef public Py_ssize_t unsettled
    cdef public bint production_open
    cdef public bint stop_dispatching
    cdef public object stop_reason
    cdef public bint stop_sent
    cdef public object failure_code
    cdef public object failure_message
    cdef public object failure_retryable
    cdef public bint discard_outputs
    cdef public bint converged
    cdef public bint removed
    cdef public bint in_ring
    cdef public bint dirty
    cdef public Py_ssize_t succeeded
    cdef public Py_ssize_t calls_failed
    cdef public Py_ssize_t call_retries
    cdef public Py_ssize_t cache_hits
    cdef public object first_failure
    cdef public object failures_retryable


@cython.final
cdef class ExecutorRecord:
    cdef public object view
    cdef public object heartbeat_seq
    cdef public object heartbeat_runnable
    cdef public Py_ssize_t completions
    cdef public dict calls
    cdef public bint attached


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

    cdef int _bind_failed(self, CallRecord ctx, now, list out) except -1
    cdef int _cancel_subtree(self, CallRecord parent, reason, list out) except -1
    cdef int _attempt_failed(self, CallRecord ctx, kind, bint retryable, message, budget_used_ms,
                             now, list out) except -1
    cdef int _drain(self, TaskCalls task, list out) except -1
    cdef int _set_terminal(self, CallRecord ctx, bint ok, object output, object kind,
                           object message, object retryable, object budget_used_ms,
                           bint counted, list out, bint notify) except -1
