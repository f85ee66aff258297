# The C declarations of records.py (Cython's pure-Python mode): the dispatcher's
# records as cdef classes whose fields the loop reads and writes in C, the
# functions that build them, and set_state: compiled, the one state change is an
# inline store (the interpreted form checks it against TRANSITIONS).
cimport cython
from cpython cimport array as carray

from blockx._fast.readyqueue cimport ReadyQueue, ready_push
from blockx._fast.cachekey cimport cache_key_c
from blockx._fast.scoring cimport ExecutorView

# The call states in C: the values of records.py's READY ... DONE (a test holds
# them equal), compared in C by the compiled loop.
cdef enum:
    _READY = 0
    _RUNNING = 1
    _WAITING = 2
    _DONE = 3

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
    cdef public object batch
    cdef unsigned int[::1] _fv          # fidx and offs as C arrays, for take_call
    cdef long long[::1] _ov


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

    cpdef int bind(self, CallRecord call) except -1


cdef tuple _check_spec(task_id, Py_ssize_t i, spec)
cdef CallRecord _new_call(str call_id, function_id, digest, entry_selector, args_json, key,
                             Py_ssize_t index, Py_ssize_t batch_idx)
cdef bint _block_in_range(fidx, offs, Py_ssize_t nfns, Py_ssize_t nargs) except -1
cdef int _init_block(CallBlock self, prefix, Py_ssize_t batch_idx, list fns, fidx, bytes args,
                     offs) except -1
cdef CallRecord _take(TaskCalls task, dict by_id)
cdef int _join(CallRecord leader, CallRecord waiter) except -1


cdef inline void set_state(CallRecord call, int state) noexcept:
    call.state = state
