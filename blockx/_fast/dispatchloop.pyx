# cython: always_allow_keywords=False
# The DispatcherCore's per-call state and per-call loop (compiled; twin:
# dispatchloop_py.py, which documents what it holds and its rules).
#
# The records are cdef classes so that the loop reads and writes their fields
# in C, and their counters and flags live inline (no int object per index).
# Values that come from executor frames or the config (budgets, retryable,
# attempts policy) stay Python objects so the compiled and twin versions accept
# exactly the same values. Object fields take part in the cyclic GC (a context
# points at its task, which lists the context). The loop's code is the twin's,
# statement for statement, with types: keep the two in step.

cimport cython
from collections import deque

READY = 0
RUNNING = 1
WAITING = 2
DONE = 3
STATE_NAMES = ("READY", "RUNNING", "WAITING", "DONE")

__all__ = ["CallContext", "make_calls", "READY", "RUNNING", "WAITING", "DONE", "STATE_NAMES",
           "Batch", "TaskCalls", "InstanceState", "ExecutorRecord", "DispatchLoop"]

cdef enum:
    _READY = 0
    _RUNNING = 1
    _WAITING = 2
    _DONE = 3


@cython.final
cdef class CallContext:

    def __init__(self, call_id, function_id, digest, entry_selector, args_json, key,
                 Py_ssize_t index, Py_ssize_t batch_idx):
        self.call_id = call_id
        self.task = None
        self.index = index
        self.batch_idx = batch_idx
        self.function_id = function_id
        self.digest = digest
        self.entry_selector = entry_selector
        self.args_json = args_json
        self.key = key
        self.state = 0
        self.executor_id = ""
        self.exec = None
        self.bound = False
        self.attempt_count = 0
        self.budget_ms = 0
        self.parent = None
        self.depth = 0
        self.request_id = ""
        self.children = None
        self.waiters = None
        self.leader = None
        self.retry_armed = False
        self.parked = False
        self.ok = False
        self.output = None
        self.error_kind = ""
        self.error_message = ""
        self.retryable = False
        self.budget_used_ms = 0

    def __repr__(self):
        return (f"<CallContext {self.call_id} {STATE_NAMES[self.state]} "
                f"attempt={self.attempt_count} executor={self.executor_id!r}>")


def make_calls(str task_id, str prefix, calls, Py_ssize_t batch_idx, cache_key):
    cdef list out = []
    cdef Py_ssize_t i = 0
    cdef CallContext ctx
    for spec in calls:
        try:
            function_id, digest, args_json, entry_selector = spec
        except (TypeError, ValueError):
            raise ValueError(f"task {task_id}: call {i} must be (function_id, digest, args_json, "
                             f"entry_selector), got {spec!r}") from None
        if type(function_id) is not str or not function_id:
            raise ValueError(f"task {task_id}: call {i} needs a non-empty function_id, "
                             f"got {function_id!r}")
        if type(digest) is not str:
            raise ValueError(f"task {task_id}: call {i} digest must be a str, got {digest!r}")
        if type(args_json) is not bytes:
            raise ValueError(f"task {task_id}: call {i} args_json must be canonical JSON bytes, "
                             f"got {type(args_json).__name__}")
        if type(entry_selector) is not str:
            raise ValueError(f"task {task_id}: call {i} entry_selector must be a str, "
                             f"got {entry_selector!r}")
        ctx = CallContext.__new__(CallContext)
        ctx.call_id = prefix + str(i)
        ctx.task = None
        ctx.index = i
        ctx.batch_idx = batch_idx
        ctx.function_id = function_id
        ctx.digest = digest
        ctx.entry_selector = entry_selector or "main"
        ctx.args_json = args_json
        ctx.key = cache_key(function_id, digest, args_json)
        ctx.executor_id = ""
        ctx.budget_ms = 0
        ctx.request_id = ""
        ctx.error_kind = ""
        ctx.error_message = ""
        ctx.retryable = False
        ctx.budget_used_ms = 0
        out.append(ctx)
        i += 1
    return out


@cython.final
cdef class Batch:

    def __init__(self, Py_ssize_t idx, calls):
        self.idx = idx
        self.calls = calls
        self.remaining = len(calls)


@cython.final
cdef class InstanceState:

    def __init__(self, instance_id):
        self.instance_id = instance_id
        self.ring = deque()
        self.inflight = 0
        self.last_served = 0
        self.tasks = 0


@cython.final
cdef class TaskCalls:

    def __init__(self, task_id, fast_fail, max_attempts, base_backoff_ms, jitter_percent,
                 InstanceState instance, streaming, ready):
        self.task_id = task_id
        self.fast_fail = fast_fail
        self.max_attempts = max_attempts
        self.base_backoff_ms = base_backoff_ms
        self.jitter_percent = jitter_percent
        self.instance = instance
        self.streaming = streaming
        self.ready = ready
        self.inflight = 0
        self.pending = {}
        self.total = 0
        self.outputs = []
        self.output_bytes = 0
        self.cache = {}
        self.flights = {}
        self.batches = {}
        self.settle_ready = []
        self.next_batch_idx = 0
        self.unsettled = 0
        self.production_open = streaming
        self.stop_dispatching = False
        self.stop_reason = ""
        self.stop_sent = False
        self.failure_code = ""
        self.failure_message = ""
        self.failure_retryable = False
        self.discard_outputs = False
        self.converged = False
        self.removed = False
        self.in_ring = False
        self.dirty = False
        self.succeeded = 0
        self.calls_failed = 0
        self.call_retries = 0
        self.cache_hits = 0
        self.first_failure = ""
        self.failures_retryable = True


@cython.final
cdef class ExecutorRecord:

    def __init__(self, view):
        self.view = view
        self.heartbeat_seq = -1
        self.heartbeat_runnable = 0
        self.completions = 0
        self.calls = {}
        self.attached = True


cdef inline int _join(CallContext leader, CallContext waiter) except -1:
    waiter.leader = leader
    if leader.waiters is None:
        leader.waiters = [waiter]
    else:
        leader.waiters.append(waiter)
    (<TaskCalls?>waiter.task).cache_hits += 1
    return 0


def join(CallContext leader, CallContext waiter):
    """Singleflight: waiter takes leader's result (roots of one task only)."""
    _join(leader, waiter)


@cython.final
cdef class DispatchLoop:

    def __init__(self, dict by_id, tasks, sched, ex, subcalls, deadline, max_output,
                 dict commands, dict texts):
        self.by_id = by_id
        self.tasks = tasks
        self.sched = sched
        self.ex = ex
        self.subcalls = subcalls
        self.deadline = deadline
        self.max_output = max_output
        self.on_terminal = None
        self.BindCall = commands["BindCall"]
        self.UnbindCall = commands["UnbindCall"]
        self.DispatchCallCmd = commands["DispatchCallCmd"]
        self.CompleteCallFromCache = commands["CompleteCallFromCache"]
        self.SubcallDone = commands["SubcallDone"]
        self.CALL_FAILED = texts["CALL_FAILED"]
        self.ERR_SUBCALL_FAILED = texts["ERR_SUBCALL_FAILED"]

    # --- admission ---------------------------------------------------------------------

    def dispatch(self, now):
        cdef list out = []
        cdef CallContext ctx, nxt
        cdef TaskCalls task
        cdef ExecutorRecord rec
        cdef Py_ssize_t i
        sched = self.sched
        next_task = sched.next_task
        served = sched.served
        ex = self.ex
        cdef list views = ex.views
        cdef list recs = ex.recs
        select_fn = ex.select_fn
        sample, max_runnable, max_inflight, mem, stall = ex.select_params()
        deadline = self.deadline
        BindCall = self.BindCall
        while True:
            t = next_task()
            if t is None:
                break
            task = <TaskCalls?>t
            ready = task.ready
            ctx = <CallContext?>ready.pop()
            if ctx.state != _READY:
                continue
            key = ctx.key
            cached = task.cache.get(key)
            if cached is not None:
                task.cache_hits += 1
                out.append(self.CompleteCallFromCache(ctx.call_id, task.task_id, False, ""))
                self._set_terminal(ctx, True, cached, "", "", False, 0, True, out, True)
                continue
            leader = task.flights.get(key)
            if leader is not None and leader is not ctx:  # ctx itself leads while retrying
                _join(<CallContext?>leader, ctx)
                continue
            i = select_fn(views, now, sample, max_runnable, max_inflight, mem, stall) if views else -1
            if i < 0:
                ready.push_front(ctx)
                sched.unserved()
                break
            rec = <ExecutorRecord?>recs[i]
            ctx.state = _RUNNING
            ctx.attempt_count += 1
            ctx.bound = False
            ctx.budget_ms = deadline
            view = rec.view
            view.local_inflight += 1
            rec.calls[ctx.call_id] = ctx
            ctx.exec = rec
            eid = ctx.executor_id = view.executor_id
            task.inflight += 1
            task.instance.inflight += 1
            task.flights[key] = ctx
            out.append(BindCall(ctx.call_id, eid, task.task_id, False, ""))
            while ready:
                nxt = <CallContext?>ready.peek()
                if nxt.key != key:
                    break
                ready.pop()
                if nxt.state == _READY:
                    _join(ctx, nxt)
            served(task)
        return out

    # --- binding -----------------------------------------------------------------------

    def executor_bound(self, call_id, executor_id):
        cdef CallContext ctx
        c = self.by_id.get(call_id)
        if c is None:
            if executor_id:
                return [self.UnbindCall(call_id, executor_id)]
            return []
        ctx = <CallContext?>c
        if (ctx.state != _RUNNING or ctx.bound
                or (executor_id and ctx.executor_id != executor_id)):
            if executor_id and (ctx.state == _READY or ctx.state == _DONE
                                or ctx.executor_id != executor_id):
                return [self.UnbindCall(call_id, executor_id)]
            return []
        ctx.bound = True
        parent = ctx.parent
        cdef list out = [self.DispatchCallCmd(call_id, ctx.executor_id, (<TaskCalls?>ctx.task).task_id,
                                              ctx.function_id, ctx.digest, ctx.entry_selector,
                                              ctx.args_json, ctx.budget_ms, ctx.attempt_count,
                                              parent.call_id if parent is not None else "")]
        if ctx.children:
            self.subcalls.bind_children(ctx, out)
        return out

    # --- completion --------------------------------------------------------------------

    def call_completed(self, call_id, attempt_seq, output_json, budget_used_ms):
        cdef CallContext ctx
        cdef ExecutorRecord rec
        cdef TaskCalls task
        c = self.by_id.get(call_id)
        if c is None:
            return []
        ctx = <CallContext?>c
        cdef int st = ctx.state
        if (st != _RUNNING and st != _WAITING) or not ctx.bound or ctx.attempt_count != attempt_seq:
            return []
        if type(output_json) is not bytes:
            output_json = bytes(output_json)
        rec = <ExecutorRecord?>ctx.exec
        cdef list out = [self.UnbindCall(call_id, ctx.executor_id)]
        rec.completions += 1
        view = rec.view
        if view.runnable > 0:
            view.runnable -= 1
        tasks = self.tasks
        if ctx.parent is None and rec.attached:
            # TaskTable.release inlined for the common case (a root on an attached executor).
            ctx.exec = None
            view.local_inflight -= 1
            del rec.calls[call_id]
            task = <TaskCalls?>ctx.task
            task.inflight -= 1
            task.instance.inflight -= 1
            if task.ready and not task.in_ring:
                self.sched.wake(task)
            if task.stop_dispatching:
                tasks.mark_dirty(task)
        else:
            tasks.release(ctx)
        self._set_terminal(ctx, True, output_json, "", "", False, budget_used_ms, True, out, True)
        return out

    # --- terminal accounting (TaskTable.set_terminal) -----------------------------------

    def set_terminal(self, CallContext ctx, ok, output, kind, message, retryable, budget_used_ms,
                     counted, list out, notify=True):
        self._set_terminal(ctx, ok, output, kind, message, retryable, budget_used_ms, counted,
                           out, notify)

    @cython.boundscheck(True)
    @cython.wraparound(True)
    cdef int _set_terminal(self, CallContext ctx, bint ok, object output, object kind,
                           object message, object retryable, object budget_used_ms,
                           bint counted, list out, bint notify) except -1:
        cdef TaskCalls task
        cdef CallContext parent, w
        cdef Batch batch
        if ctx.state == _DONE:
            return 0
        if self.on_terminal is not None:
            self.on_terminal(ctx)
        ctx.state = _DONE
        ctx.output = output
        ctx.budget_used_ms = budget_used_ms
        ctx.retry_armed = False
        if ok:
            ctx.ok = True
        else:
            ctx.error_kind = kind
            ctx.error_message = message
            ctx.retryable = retryable
        if ctx.parked:
            self.subcalls.unpark(ctx)
        if ctx.children:
            self.subcalls.cancel_subtree(ctx, "parent call ended", out)
        task = <TaskCalls?>ctx.task
        if ctx.parent is not None:
            parent = <CallContext?>ctx.parent
            siblings = parent.children
            if siblings:
                siblings.pop(ctx.call_id, None)
            if ok:
                task.cache[ctx.key] = output
            if notify and (parent.state == _RUNNING or parent.state == _WAITING):
                if ok:
                    out.append(self.SubcallDone(ctx.call_id, parent.call_id, parent.executor_id,
                                                ctx.request_id, True, output, "", "", False,
                                                budget_used_ms, parent.attempt_count, ""))
                else:
                    out.append(self.SubcallDone(
                        ctx.call_id, parent.call_id, parent.executor_id, ctx.request_id, False,
                        None, self.ERR_SUBCALL_FAILED,
                        f"subcall {ctx.function_id} ({ctx.call_id}) failed: {kind}: {message}",
                        retryable, budget_used_ms, parent.attempt_count, kind))
            return 0
        del task.pending[ctx.call_id]
        key = ctx.key
        if ok:
            task.succeeded += 1
            task.cache[key] = output
            if not task.discard_outputs:
                task.outputs[ctx.index] = output
                task.output_bytes += len(output)
                if self.max_output and task.output_bytes > self.max_output:
                    self.tasks.output_exceeded(task)
        elif counted:
            task.calls_failed += 1
            task.failures_retryable = task.failures_retryable and retryable
            if not task.first_failure:
                task.first_failure = (f"call {ctx.call_id} (function {ctx.function_id}) failed "
                                      f"after {ctx.attempt_count} attempt(s): {kind}: {message}")
            if task.fast_fail and not task.failure_code:
                task.failure_code = self.CALL_FAILED
                task.failure_message = task.first_failure
                task.failure_retryable = retryable
                self.tasks.stop(task, "call failed")
        if task.flights.get(key) is ctx:
            del task.flights[key]
        waiters = ctx.waiters
        if waiters:
            ctx.waiters = None
            for w in waiters:
                self._set_terminal(w, ok, output, kind, message, retryable, 0, counted, out, True)
        batch = <Batch?>task.batches[ctx.batch_idx]
        batch.remaining -= 1
        if batch.remaining == 0:
            task.settle_ready.append(batch)
        if not task.dirty:
            self.tasks.mark_dirty(task)
        return 0
