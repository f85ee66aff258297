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
from cpython cimport array as carray
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from array import array
from collections import deque

from operator import attrgetter

from blockx._fast.readyqueue cimport ReadyQueue
from blockx._fast.scoring cimport ExecutorView, select_index
from blockx._fast.cachekey cimport cache_key_c
from blockx._fast.cachekey import cache_key as _compiled_cache_key
from blockx.core.dispatch.callcmds cimport new_bind_call, new_dispatch_call, new_unbind_call
from blockx.core.dispatch.commands import CancelCallCmd, CompleteCallFromCache, SubcallDone
from blockx.core.dispatch import types as _types
from blockx.core.dispatch.types import SubcallRejected

# The failure codes the lifecycle sets, as C globals (not names of this module).
cdef object CALL_FAILED = _types.CALL_FAILED
cdef object ERR_CANCELLED = _types.ERR_CANCELLED
cdef object ERR_EXECUTOR_LOST = _types.ERR_EXECUTOR_LOST
cdef object ERR_SUBCALL_FAILED = _types.ERR_SUBCALL_FAILED

READY = 0
RUNNING = 1
WAITING = 2
DONE = 3
STATE_NAMES = ("READY", "RUNNING", "WAITING", "DONE")
_by_depth = attrgetter("depth")

__all__ = ["CallRecord", "make_calls", "READY", "RUNNING", "WAITING", "DONE", "STATE_NAMES",
           "Batch", "TaskCalls", "InstanceState", "ExecutorRecord", "CallLifecycle", "link_calls", "unlink_calls", "TaskScheduler",
           "CallBlock", "make_block", "take_call"]

cdef enum:
    _READY = 0
    _RUNNING = 1
    _WAITING = 2
    _DONE = 3


# A freelist: contexts come and go by the million; reusing their memory skips
# the allocator on the per-call path.
@cython.final
@cython.freelist(256)
cdef class CallRecord:

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
        return (f"<CallRecord {self.call_id} {STATE_NAMES[self.state]} "
                f"attempt={self.attempt_count} executor={self.executor_id!r}>")


cdef tuple _check_spec(task_id, Py_ssize_t i, spec):
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
    return function_id, digest, args_json, entry_selector


cdef inline CallRecord _new_context(str call_id, function_id, digest, entry_selector, args_json, key,
                                     Py_ssize_t index, Py_ssize_t batch_idx):
    # CallRecord.__init__ without a Python call: the one place a root's context is made
    # (make_calls, and _take at admission); the twin calls its constructor.
    cdef CallRecord ctx = CallRecord.__new__(CallRecord)
    ctx.call_id = call_id
    ctx.task = None
    ctx.index = index
    ctx.batch_idx = batch_idx
    ctx.function_id = function_id
    ctx.digest = digest
    ctx.entry_selector = entry_selector
    ctx.args_json = args_json
    ctx.key = key
    ctx.executor_id = ""
    ctx.budget_ms = 0
    ctx.request_id = ""
    ctx.error_kind = ""
    ctx.error_message = ""
    ctx.retryable = False
    ctx.budget_used_ms = 0
    return ctx


def make_calls(str task_id, str prefix, calls, Py_ssize_t batch_idx, cache_key):
    cdef list out = []
    cdef Py_ssize_t i = 0
    cdef bint c_key = cache_key is _compiled_cache_key   # types are checked below: call it in C
    for spec in calls:
        function_id, digest, args_json, entry_selector = _check_spec(task_id, i, spec)
        out.append(_new_context(f"{prefix}{i}", function_id, digest, entry_selector or "main", args_json,
                                cache_key_c(function_id, digest, args_json) if c_key
                                else cache_key(function_id, digest, args_json), i, batch_idx))
        i += 1
    return out


@cython.final
cdef class CallBlock:
    # The compact queued form of one committed call list (twin: dispatchloop_py.CallBlock,
    # which documents it).

    def __init__(self, prefix, Py_ssize_t batch_idx, list fns, fidx, bytes args, offs, cache_key):
        # take_call reads fidx and offs as C arrays: a block made here (not by
        # make_block) is checked in full, once.
        if (type(fidx) is not array or fidx.typecode != "I" or type(offs) is not array
                or offs.typecode != "q" or len(offs) != len(fidx) + 1):
            raise TypeError("CallBlock needs fidx = array('I') and offs = array('q') of one more")
        if not _block_in_range(fidx, offs, len(fns), len(args)):
            raise ValueError("CallBlock: fidx or offs out of range")
        _init_block(self, prefix, batch_idx, fns, fidx, args, offs, cache_key)

    def __len__(self):
        return self.n


cdef bint _block_in_range(carray.array fidx, carray.array offs, Py_ssize_t nfns,
                          Py_ssize_t nargs):
    # offs starts at 0, never decreases and ends at len(args); every fidx < len(fns).
    cdef Py_ssize_t j, n = len(fidx)
    cdef unsigned int* f = fidx.data.as_uints
    cdef long long* o = offs.data.as_longlongs
    if o[0] != 0 or o[n] != nargs:
        return False
    for j in range(n):
        if f[j] >= nfns or o[j] > o[j + 1]:
            return False
    return True


cdef int _init_block(CallBlock self, prefix, Py_ssize_t batch_idx, list fns, fidx, bytes args,
                     offs, cache_key) except -1:
    self.prefix = prefix
    self.batch_idx = batch_idx
    self.n = len(fidx)
    self.pos = 0
    self.base = 0
    self.fns = fns
    self.fidx = fidx
    self.args = args
    self.offs = offs
    self.cache_key = cache_key
    self.batch = None
    self.c_key = cache_key is _compiled_cache_key
    return 0


def make_block(str task_id, str prefix, calls, Py_ssize_t batch_idx, cache_key):
    cdef list fns = []
    cdef dict table = {}
    cdef carray.array fidx = array("I")
    cdef carray.array offs = array("q", [0])
    cdef list parts = []
    cdef long long size = 0
    cdef Py_ssize_t i = 0
    cdef unsigned int k = 0
    cdef tuple spec_t
    last_fid = last_digest = last_entry = None
    for spec in calls:
        # PinnedCall is a NamedTuple: a tuple subclass, read as a tuple.
        if isinstance(spec, tuple) and len(<tuple>spec) == 4:
            spec_t = <tuple>spec
            function_id = spec_t[0]
            digest = spec_t[1]
            args_json = spec_t[2]
            entry_selector = spec_t[3]
            if (type(function_id) is not str or not function_id or type(digest) is not str
                    or type(args_json) is not bytes or type(entry_selector) is not str):
                _check_spec(task_id, i, spec)   # raises the error that names the bad field
        else:
            function_id, digest, args_json, entry_selector = _check_spec(task_id, i, spec)
        # Calls of one list mostly share their function: skip the table for a repeat.
        if not (digest is last_digest and entry_selector is last_entry and function_id == last_fid):
            fn = (function_id, digest, entry_selector or "main")
            kk = table.get(fn)
            if kk is None:
                kk = table[fn] = len(fns)
                fns.append(fn)
            k = kk
            last_fid, last_digest, last_entry = function_id, digest, entry_selector
        carray.resize_smart(fidx, i + 1)
        fidx.data.as_uints[i] = k
        parts.append(args_json)
        size += len(<bytes>args_json)
        carray.resize_smart(offs, i + 2)
        offs.data.as_longlongs[i + 1] = size
        i += 1
    cdef CallBlock block = CallBlock.__new__(CallBlock)
    _init_block(block, prefix, batch_idx, fns, fidx, b"".join(parts), offs, cache_key)
    return block


cdef CallRecord _take(TaskCalls task, dict by_id):
    cdef CallBlock block = <CallBlock?>task.blocks[0]
    cdef Py_ssize_t i = block.pos
    block.pos = i + 1
    if block.pos == block.n:
        task.blocks.popleft()
    cdef tuple fn = <tuple>block.fns[(<carray.array>block.fidx).data.as_uints[i]]
    function_id = fn[0]
    digest = fn[1]
    cdef long long* offs = (<carray.array>block.offs).data.as_longlongs
    cdef long long a = offs[i]
    args_json = PyBytes_FromStringAndSize(PyBytes_AS_STRING(block.args) + a, offs[i + 1] - a)
    call_id = f"{block.prefix}{i}"
    cdef CallRecord ctx = _new_context(call_id, function_id, digest, fn[2], args_json,
                                        cache_key_c(function_id, digest, args_json) if block.c_key
                                        else block.cache_key(function_id, digest, args_json),
                                        block.base + i, block.batch_idx)
    ctx.task = task
    task.queued -= 1
    task.pending[call_id] = ctx
    (<Batch?>block.batch).calls.append(ctx)
    by_id[call_id] = ctx
    return ctx


def take_call(TaskCalls task, dict by_id):
    """Admit the task's next never-admitted queued call (twin documents it)."""
    return _take(task, by_id)


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
cdef class TaskScheduler:
    # The rules are in blockx/core/dispatch/fairness.py; the code is the twin's.

    def __init__(self, fair, Py_ssize_t quantum, Py_ssize_t window):
        self._fair = fair
        self._quantum = quantum
        self._window = window
        self._instances = {}
        self._single = InstanceState("")
        self._current = None
        self._left = 0
        self._seq = 0

    def attach(self, instance_id):
        """The group a new task joins."""
        cdef InstanceState inst
        if not self._fair:
            inst = self._single
        else:
            inst = self._instances.get(instance_id)
            if inst is None:
                inst = self._instances[instance_id] = InstanceState(instance_id)
        inst.tasks += 1
        return inst

    def detach(self, TaskCalls task):
        cdef InstanceState inst = task.instance
        if task.in_ring:
            task.in_ring = False
            try:
                inst.ring.remove(task)
            except ValueError:
                pass
        inst.tasks -= 1
        if self._fair and inst.tasks <= 0:
            self._instances.pop(inst.instance_id, None)
            if self._current is inst:
                self._current = None

    cdef int wake_c(self, TaskCalls task) except -1:
        if not task.in_ring and not task.removed:
            task.in_ring = True
            task.instance.ring.append(task)
        return 0

    def wake(self, TaskCalls task):
        self.wake_c(task)

    cdef object next_task_c(self):
        cdef Py_ssize_t window = self._window
        cdef TaskCalls t
        cdef InstanceState inst
        if not self._fair:
            ring = self._single.ring
            while ring:
                t = <TaskCalls?>ring[0]
                if (t.ready._count or t.queued) and not t.stop_dispatching and t.inflight < window:
                    return t
                ring.popleft()
                t.in_ring = False
            return None
        while True:
            inst = self._current
            if inst is None or self._left <= 0 or not inst.ring:
                inst = self._pick()
                if inst is None:
                    return None
                self._current = inst
                self._left = self._quantum
            ring = inst.ring
            while ring:
                t = <TaskCalls?>ring[0]
                if (t.ready._count or t.queued) and not t.stop_dispatching and t.inflight < window:
                    return t
                ring.popleft()
                t.in_ring = False

    def next_task(self):
        """The task to admit from next, or None when no task can take a call."""
        return self.next_task_c()

    def _pick(self):
        cdef InstanceState best = None
        cdef InstanceState inst
        for i in self._instances.values():
            inst = <InstanceState?>i
            if not inst.ring:
                continue
            if (best is None or inst.inflight < best.inflight
                    or (inst.inflight == best.inflight
                        and (inst.last_served < best.last_served
                             or (inst.last_served == best.last_served
                                 and inst.instance_id < best.instance_id)))):
                best = inst
        return best

    cdef int served_c(self, TaskCalls task) except -1:
        cdef InstanceState inst = task.instance
        self._seq += 1
        inst.last_served = self._seq
        ring = inst.ring
        if len(ring) > 1 and ring[0] is task:
            ring.rotate(-1)
        self._left -= 1
        return 0

    def served(self, TaskCalls task):
        """task (the ring head) just got a bind: rotate it and spend quantum."""
        self.served_c(task)

    def unserved(self):
        """No executor could take the picked instance's call. A turn that has
        not served a bind yet is void: the next round re-selects by the
        then-current in-flight counts. A turn already under way continues."""
        if self._left >= self._quantum:
            self._current = None

    def instance_inflight(self):
        """instance_id -> root calls in flight (fair mode; for tests/metrics)."""
        if not self._fair:
            return {"": self._single.inflight}
        return {i.instance_id: i.inflight for i in self._instances.values()}


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
        self.blocks = deque()
        self.queued = 0
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


cdef inline int _join(CallRecord leader, CallRecord waiter) except -1:
    waiter.leader = leader
    if leader.waiters is None:
        leader.waiters = [waiter]
    else:
        leader.waiters.append(waiter)
    (<TaskCalls?>waiter.task).cache_hits += 1
    return 0


def link_calls(TaskCalls task, list calls, dict by_id):
    cdef CallRecord ctx
    cdef dict pending = task.pending
    cdef ReadyQueue ready = task.ready
    for c in calls:
        ctx = <CallRecord?>c
        ctx.task = task
        pending[ctx.call_id] = ctx
        ready.push_c(ctx)
        by_id[ctx.call_id] = ctx


def unlink_calls(list calls, dict by_id):
    for c in calls:
        by_id.pop((<CallRecord?>c).call_id, None)


def join(CallRecord leader, CallRecord waiter):
    """Singleflight: waiter takes leader's result (roots of one task only)."""
    _join(leader, waiter)


@cython.final
cdef class CallLifecycle:
    # Every call event and the one place a call becomes DONE (the twin documents
    # each method; the rules are in blockx/core/dispatch/lifecycle.py).

    def __init__(self, dict by_id, tasks, TaskScheduler sched, ex, subcalls, retry, deadline,
                 max_output):
        self.by_id = by_id
        self.tasks = tasks
        self.sched = sched
        self.ex = ex
        self.subcalls = subcalls
        self.retry = retry
        self.deadline = deadline
        self.max_output = max_output
        self.on_terminal = None

    # --- admission ---------------------------------------------------------------------

    def dispatch(self, now):
        cdef list out = []
        cdef CallRecord ctx, nxt
        cdef TaskCalls task
        cdef ExecutorRecord rec
        cdef ExecutorView view
        cdef ReadyQueue ready
        cdef Py_ssize_t i
        cdef TaskScheduler sched = self.sched
        ex = self.ex
        cdef list views = ex.views
        cdef list recs = ex.recs
        sample, max_runnable, max_inflight, mem, stall = ex.select_params()
        # Sampling: each decision's scan starts at a random view (the core's rand).
        sample_start = ex.sample_start if sample > 0 else None
        cdef long long c_now = now, c_run = max_runnable, c_inf = max_inflight, c_mem = mem
        cdef long long c_stall = stall
        cdef Py_ssize_t c_sample = sample, start = 0
        deadline = self.deadline
        cdef dict by_id = self.by_id
        while True:
            t = sched.next_task_c()
            if t is None:
                break
            task = <TaskCalls>t
            ready = task.ready
            ctx = <CallRecord?>ready.pop_c() if ready._count else _take(task, by_id)
            if ctx.state != _READY:
                continue
            key = ctx.key
            cached = task.cache.get(key)
            if cached is not None:
                task.cache_hits += 1
                out.append(CompleteCallFromCache(ctx.call_id, task.task_id, False, ""))
                self._set_terminal(ctx, True, cached, "", "", False, 0, True, out, True)
                continue
            leader = task.flights.get(key)
            if leader is not None and leader is not ctx:  # ctx itself leads while retrying
                _join(<CallRecord?>leader, ctx)
                continue
            if not views:
                i = -1
            else:
                if sample_start is not None:
                    start = sample_start(len(views))
                i = select_index(views, c_now, c_sample, c_run, c_inf, c_mem, c_stall, start)
            if i < 0:
                ready.push_front_c(ctx)
                sched.unserved()
                break
            rec = <ExecutorRecord?>recs[i]
            ctx.state = _RUNNING
            ctx.attempt_count += 1
            ctx.bound = False
            ctx.budget_ms = deadline
            view = <ExecutorView?>rec.view
            view.local_inflight += 1
            eid = view.executor_id
            ctx.executor_id = eid
            rec.calls[ctx.call_id] = ctx
            ctx.exec = rec
            task.inflight += 1
            task.instance.inflight += 1
            task.flights[key] = ctx
            out.append(new_bind_call(ctx.call_id, eid, task.task_id, False, ""))
            while True:
                if ready._count:
                    nxt = <CallRecord?>ready._buf[ready._head]
                elif task.queued:
                    nxt = _take(task, by_id)
                    ready.push_c(nxt)
                else:
                    break
                if nxt.key != key:
                    break
                ready.pop_c()
                if nxt.state == _READY:
                    _join(ctx, nxt)
            sched.served_c(task)
        return out

    # --- binding -----------------------------------------------------------------------

    def executor_bound(self, call_id, now, executor_id=""):
        cdef CallRecord ctx
        c = self.by_id.get(call_id)
        if c is None:
            if executor_id:
                return [new_unbind_call(call_id, executor_id)]
            return []
        ctx = <CallRecord?>c
        if (ctx.state != _RUNNING or ctx.bound
                or (executor_id and ctx.executor_id != executor_id)):
            if executor_id and (ctx.state == _READY or ctx.state == _DONE
                                or ctx.executor_id != executor_id):
                return [new_unbind_call(call_id, executor_id)]
            return []
        ctx.bound = True
        parent = ctx.parent
        parent_id = parent.call_id if parent is not None else ""
        task_id = (<TaskCalls?>ctx.task).task_id
        cdef list out = [new_dispatch_call(call_id, ctx.executor_id, task_id, ctx.function_id,
                                           ctx.digest, ctx.entry_selector, ctx.args_json,
                                           ctx.budget_ms, ctx.attempt_count, parent_id)]
        if ctx.children:
            self.subcalls.bind_children(ctx, out)
        return out

    def bind_failed(self, call_id, now):
        cdef CallRecord ctx
        c = self.by_id.get(call_id)
        if c is None:
            return []
        ctx = <CallRecord?>c
        if ctx.state != _RUNNING or ctx.bound:
            return []
        cdef list out = []
        self._bind_failed(ctx, now, out)
        return out

    cdef int _bind_failed(self, CallRecord ctx, now, list out) except -1:
        rec = ctx.exec
        self.tasks.release(ctx)
        rec.view.healthy = False  # until the next snapshot says otherwise
        ctx.attempt_count -= 1
        ctx.state = _READY
        if ctx.parent is not None:
            self.subcalls.park(ctx)
        else:
            ctx.retry_armed = True
            self.retry.requeue(ctx, now, out)
        return 0

    # --- waits ----------------------------------------------------------------------------

    def call_waiting(self, call_id, attempt_seq, now):
        cdef CallRecord ctx
        c = self.by_id.get(call_id)
        if c is not None:
            ctx = <CallRecord?>c
            if ctx.state == _RUNNING and ctx.bound and ctx.attempt_count == attempt_seq:
                ctx.state = _WAITING
        return []

    def call_resumed(self, call_id, now):
        cdef CallRecord ctx
        c = self.by_id.get(call_id)
        if c is not None:
            ctx = <CallRecord?>c
            if ctx.state == _WAITING:
                ctx.state = _RUNNING
        return []

    # --- subcalls ---------------------------------------------------------------------------

    def add_subcall(self, parent_call_id, requesting_executor_id, request_id, function_id,
                    digest, args_json, granted_budget_ms, now=0, entry_selector="main"):
        cdef CallRecord child
        cdef TaskCalls task
        c = self.subcalls.new_child(parent_call_id, requesting_executor_id, request_id,
                                    function_id, digest, args_json, granted_budget_ms,
                                    entry_selector)
        if type(c) is SubcallRejected:
            return c, []
        child = <CallRecord?>c
        cdef list out = []
        task = <TaskCalls?>child.task
        cached = task.cache.get(child.key)
        if cached is not None:
            task.cache_hits += 1
            out.append(CompleteCallFromCache(child.call_id, task.task_id, True, parent_call_id))
            self._set_terminal(child, True, cached, "", "", False, 0, True, out, True)
            return child.call_id, out
        self.subcalls.attach(child, out)
        return child.call_id, out

    def cancel_subtree(self, CallRecord parent, reason, list out):
        self._cancel_subtree(parent, reason, out)

    cdef int _cancel_subtree(self, CallRecord parent, reason, list out) except -1:
        cdef CallRecord child
        cdef int st
        children = parent.children
        if not children:
            return 0
        parent.children = None
        tasks = self.tasks
        for c in list(children.values()):
            child = <CallRecord?>c
            st = child.state
            if st == _DONE:
                continue
            if st == _RUNNING or st == _WAITING:
                out.append(CancelCallCmd(child.call_id, child.executor_id, reason,
                                         child.attempt_count))
                tasks.release(child)
            self._set_terminal(child, False, None, ERR_CANCELLED, reason, False, 0, False, out,
                               False)
        return 0

    # --- completion and failure --------------------------------------------------------------

    def call_completed(self, call_id, attempt_seq, output_json, budget_used_ms, now):
        cdef CallRecord ctx
        cdef ExecutorRecord rec
        cdef ExecutorView view
        cdef TaskCalls task
        c = self.by_id.get(call_id)
        if c is None:
            return []
        ctx = <CallRecord?>c
        cdef int st = ctx.state
        if (st != _RUNNING and st != _WAITING) or not ctx.bound or ctx.attempt_count != attempt_seq:
            return []
        if type(output_json) is not bytes:
            output_json = bytes(output_json)
        rec = <ExecutorRecord?>ctx.exec
        cdef list out = [new_unbind_call(call_id, ctx.executor_id)]
        rec.completions += 1
        view = <ExecutorView?>rec.view
        if view.runnable > 0:
            view.runnable -= 1
        tasks = self.tasks
        if rec.attached:
            # TaskCallTable.release inlined for the common case (an attached executor):
            # ExecutorTable.unbind, and for a root the task window's accounting.
            ctx.exec = None
            view.local_inflight -= 1
            del rec.calls[call_id]
            if ctx.parent is None:
                task = <TaskCalls?>ctx.task
                task.inflight -= 1
                task.instance.inflight -= 1
                if (task.ready._count or task.queued) and not task.in_ring:
                    self.sched.wake_c(task)
                if task.stop_dispatching:
                    tasks.mark_dirty(task)
        else:
            tasks.release(ctx)
        self._set_terminal(ctx, True, output_json, "", "", False, budget_used_ms, True, out, True)
        return out

    def call_failed(self, call_id, attempt_seq, error_kind, retryable, message, now,
                    budget_used_ms=0):
        cdef CallRecord ctx
        c = self.by_id.get(call_id)
        if c is None:
            return []
        ctx = <CallRecord?>c
        cdef int st = ctx.state
        # Stale: DONE; READY (backing off, or rolled back); another attempt; not yet bound.
        if (st != _RUNNING and st != _WAITING) or not ctx.bound or ctx.attempt_count != attempt_seq:
            return []
        cdef list out = [new_unbind_call(call_id, ctx.executor_id)]
        self.ex.note_completion(ctx.exec)
        self.tasks.release(ctx)
        if ctx.children:
            self._cancel_subtree(ctx, "parent call attempt failed", out)
        self._attempt_failed(ctx, error_kind, bool(retryable), message, budget_used_ms, now, out)
        return out

    cdef int _attempt_failed(self, CallRecord ctx, kind, bint retryable, message, budget_used_ms,
                             now, list out) except -1:
        if self.retry.may_retry(ctx, retryable):
            ctx.state = _READY
            ctx.bound = False
            ctx.retry_armed = True
            self.retry.arm(ctx, now, out)
        else:
            self._set_terminal(ctx, False, None, kind, message, retryable, budget_used_ms, True,
                               out, True)
        return 0

    def retry_ready(self, call_id, now):
        cdef CallRecord ctx
        cdef TaskCalls task
        c = self.by_id.get(call_id)
        if c is None:
            return []
        ctx = <CallRecord?>c
        if ctx.state != _READY or not ctx.retry_armed:
            return []
        ctx.retry_armed = False
        task = <TaskCalls?>ctx.task
        task.ready.push_front_c(ctx)
        self.sched.wake_c(task)
        if task.stop_dispatching:
            self.tasks.mark_dirty(task)
        return []

    # --- executors -----------------------------------------------------------------------

    def executor_snapshot(self, snapshots, now):
        self.ex.update(snapshots)
        cdef list out = []
        self.subcalls.retry_parked(out)
        return out

    def executor_lost(self, executor_id, now, detail=""):
        cdef ExecutorRecord rec
        cdef CallRecord ctx
        r = self.ex.records.get(executor_id)
        if r is None:
            return []
        rec = <ExecutorRecord?>r
        rec.view.healthy = False
        cdef list out = []
        message = f"executor {executor_id} lost" + (f": {detail}" if detail else "")
        for c in sorted(rec.calls.values(), key=_by_depth):
            ctx = <CallRecord?>c
            if ctx.exec is not rec:
                continue  # released by an ancestor's subtree cancellation
            if not ctx.bound:
                self._bind_failed(ctx, now, out)
                continue
            out.append(new_unbind_call(ctx.call_id, executor_id))
            self.tasks.release(ctx)
            if ctx.children:
                self._cancel_subtree(ctx, message, out)
            self._attempt_failed(ctx, ERR_EXECUTOR_LOST, True, message, 0, now, out)
        return out

    # --- the epilogue ---------------------------------------------------------------------

    def flush(self, now=0):
        cdef list out = []
        tasks = self.tasks
        while True:
            dirty = tasks.take_dirty()
            if not dirty:
                return out
            for task in dirty:
                if tasks.stop_production(task, out):
                    self._drain(<TaskCalls?>task, out)
                tasks.settle_and_converge(task, out)

    cdef int _drain(self, TaskCalls task, list out) except -1:
        cdef CallRecord ctx
        task.ready.clear()
        reason = f"task stopped dispatching: {task.stop_reason}"
        for c in list(task.pending.values()):
            ctx = <CallRecord?>c
            if ctx.state != _DONE:
                self._set_terminal(ctx, False, None, ERR_CANCELLED, reason, False, 0, False, out,
                                   True)
        cdef dict by_id = self.by_id
        while task.queued:
            self._set_terminal(_take(task, by_id), False, None, ERR_CANCELLED, reason, False, 0,
                               False, out, True)
        return 0

    def epilogue(self, now):
        cdef list out = self.dispatch(now)
        out.extend(self.flush(now))
        return out

    # --- teardown ------------------------------------------------------------------------

    def cancel_task(self, task_id, reason, now):
        cdef TaskCalls task
        cdef CallRecord ctx
        cdef int st
        tasks = self.tasks
        cdef list out = []
        t = tasks.remove(task_id, reason, out)
        if t is None:
            return out
        task = <TaskCalls?>t
        for c in list(task.pending.values()):
            ctx = <CallRecord?>c
            st = ctx.state
            if st == _RUNNING or st == _WAITING:
                out.append(CancelCallCmd(ctx.call_id, ctx.executor_id, reason, ctx.attempt_count))
                tasks.release(ctx)
            if ctx.children:
                self._cancel_subtree(ctx, reason, out)
            ctx.state = _DONE
            ctx.retry_armed = False
        task.pending.clear()
        unpark = self.subcalls.unpark
        for b in task.batches.values():
            for c in (<Batch?>b).calls:
                if (<CallRecord?>c).parked:
                    unpark(c)
        tasks.forget(task)
        return out

    def remove_task(self, task_id):
        return self.cancel_task(task_id, "task removed", 0)

    # --- terminal accounting ---------------------------------------------------------------

    def set_terminal(self, CallRecord ctx, ok, output, kind, message, retryable, budget_used_ms,
                     counted, list out, notify=True):
        self._set_terminal(ctx, ok, output, kind, message, retryable, budget_used_ms, counted,
                           out, notify)

    @cython.boundscheck(True)
    @cython.wraparound(True)
    cdef int _set_terminal(self, CallRecord ctx, bint ok, object output, object kind,
                           object message, object retryable, object budget_used_ms,
                           bint counted, list out, bint notify) except -1:
        cdef TaskCalls task
        cdef CallRecord parent, w
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
            self._cancel_subtree(ctx, "parent call ended", out)
        task = <TaskCalls?>ctx.task
        if ctx.parent is not None:
            parent = <CallRecord?>ctx.parent
            siblings = parent.children
            if siblings:
                siblings.pop(ctx.call_id, None)
            if ok:
                task.cache[ctx.key] = output
            if notify and (parent.state == _RUNNING or parent.state == _WAITING):
                if ok:
                    out.append(SubcallDone(ctx.call_id, parent.call_id, parent.executor_id,
                                           ctx.request_id, True, output, "", "", False,
                                           budget_used_ms, parent.attempt_count, ""))
                else:
                    out.append(SubcallDone(
                        ctx.call_id, parent.call_id, parent.executor_id, ctx.request_id, False,
                        None, ERR_SUBCALL_FAILED,
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
                task.failure_code = CALL_FAILED
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
