"""The DispatcherCore's per-call records and its call lifecycle: one source in
Cython's pure-Python mode, compiled with dispatchloop.pxd (the records are cdef
classes whose fields the loop reads and writes in C) and interpreted under
BLOCKX_NO_EXTENSIONS=1.

What it holds:
- the records the core's parts keep per call, task, batch, instance and
  executor (CallRecord, TaskCalls, Batch, InstanceState, ExecutorRecord): plain
  state, owned and documented by the core module that uses each
  (blockx/core/dispatch: calls, tasks, fairness, executors);
- ``make_calls``, which validates one call list and builds its contexts, and
  ``make_block``, which validates one call list into its compact queued form, a
  CallBlock (no side effects, so the core may run either off its actor); cache
  keys are cachekey's (``cachekey.cache_key``);
- ``take_call``, which turns a task's next never-admitted queued call into its
  CallRecord (the only place a queued call gets one);
- ``CallLifecycle``, every call event of the DispatcherCore and its terminal
  accounting, over the core's parts, which it is given at construction; the
  events and their rules are stated in blockx/core/dispatch/lifecycle.py.
Rules: Sans-IO like the core (no clock, no IO, randomness only from the core's
injected ``rand``, through ExecutorTable.sample_start); both forms take and
return the same values and raise the same errors.

Compiled, the loop calls its hot collaborators in C: the ready queue's
accessors, the executor scoring (select_index), the cache key (cache_key_c)
and the per-call commands (new_*), all cimported by dispatchloop.pxd.
Interpreted, the same names are bound below to those modules' Python
functions. Values that come from executor frames or the config (budgets,
retryable, attempts policy) stay Python objects in both forms, so they accept
exactly the same values. Object fields take part in the cyclic GC (a context
points at its task, which lists the context).
"""
from __future__ import annotations

from array import array
from collections import deque
from operator import attrgetter

import cython

from blockx.core.dispatch.commands import CancelCallCmd, CompleteCallFromCache, SubcallDone
from blockx.core.dispatch.types import (
    CALL_FAILED, ERR_CANCELLED, ERR_EXECUTOR_LOST, ERR_SUBCALL_FAILED, SubcallRejected)

if not cython.compiled:
    # Compiled, dispatchloop.pxd cimports these names from the hot paths.
    from blockx._fast import load
    from blockx.core.dispatch.callcmds import new_bind_call, new_dispatch_call, new_unbind_call

    select_index = load("scoring").select_executor
    cache_key_c = load("cachekey").cache_key

    def ready_len(q):
        return len(q)

    def ready_peek(q):
        return q.peek()

    def ready_pop(q):
        return q.pop()

    def ready_push(q, item):
        q.push(item)

    def ready_push_front(q, item):
        q.push_front(item)

READY = 0
RUNNING = 1
WAITING = 2
DONE = 3
STATE_NAMES = ("READY", "RUNNING", "WAITING", "DONE")
_by_depth = attrgetter("depth")

# The states as C constants of the compiled form.
_READY = cython.declare(cython.int, 0)
_RUNNING = cython.declare(cython.int, 1)
_WAITING = cython.declare(cython.int, 2)
_DONE = cython.declare(cython.int, 3)

__all__ = ["CallRecord", "make_calls", "READY", "RUNNING", "WAITING", "DONE", "STATE_NAMES",
           "Batch", "TaskCalls", "InstanceState", "ExecutorRecord", "CallLifecycle", "link_calls",
           "unlink_calls", "TaskScheduler", "CallBlock", "make_block", "take_call"]


# A freelist: contexts come and go by the million; reusing their memory skips
# the allocator on the per-call path.
@cython.final
@cython.freelist(256)
@cython.cclass
class CallRecord:
    if not cython.compiled:
        __slots__ = (
            "call_id", "task", "index", "batch_idx", "function_id", "digest", "entry_selector",
            "args_json", "key", "state", "executor_id", "exec", "bound", "attempt_count",
            "budget_ms", "parent", "depth", "request_id", "children", "waiters", "leader",
            "retry_armed", "parked", "ok", "output", "error_kind", "error_message",
            "retryable", "budget_used_ms",
        )

    def __init__(self, call_id, function_id, digest, entry_selector, args_json, key,
                 index: cython.Py_ssize_t, batch_idx: cython.Py_ssize_t):
        self.call_id = call_id
        self.task = None                # TaskCalls, set at commit
        self.index = index              # position among the task's roots; -1 for subcalls
        self.batch_idx = batch_idx
        self.function_id = function_id
        self.digest = digest
        self.entry_selector = entry_selector
        self.args_json = args_json
        self.key = key
        self.state = _READY
        self.executor_id = ""
        self.exec = None                # ExecutorRecord while bound (counted in local_inflight)
        self.bound = False
        self.attempt_count = 0
        self.budget_ms = 0
        self.parent = None
        self.depth = 0
        self.request_id = ""
        self.children = None            # active subcalls, by call id
        self.waiters = None             # singleflight waiters (leader only)
        self.leader = None              # set on a waiter
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


def _check_spec(task_id, i, spec):
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


def _new_context(call_id, function_id, digest, entry_selector, args_json, key, index, batch_idx):
    # The one place a root's context is made (make_calls, and _take at admission).
    # Compiled, CallRecord.__init__ without a Python call: the fields __new__ does
    # not already hold (NULL objects are None, C fields 0).
    if not cython.compiled:
        return CallRecord(call_id, function_id, digest, entry_selector, args_json, key, index,
                          batch_idx)
    ctx: CallRecord = CallRecord.__new__(CallRecord)
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


def make_calls(task_id: str, prefix: str, calls, batch_idx: cython.Py_ssize_t):
    """The contexts of one call list: ids ``prefix + str(i)``, cache keys by
    cachekey. Each spec is (function_id, digest, args_json, entry_selector)
    with canonical args_json bytes; an invalid spec raises ValueError naming it."""
    out: list = []
    i: cython.Py_ssize_t = 0
    for spec in calls:
        function_id, digest, args_json, entry_selector = _check_spec(task_id, i, spec)
        out.append(_new_context(f"{prefix}{i}", function_id, digest, entry_selector or "main",
                                args_json, cache_key_c(function_id, digest, args_json), i,
                                batch_idx))
        i += 1
    return out


@cython.final
@cython.cclass
class CallBlock:
    """The compact queued form of one committed call list (a one-shot phase or one
    streaming batch): calls that were never admitted hold no object of their own.

    Per call it keeps an index into ``fns`` (the distinct (function_id, digest,
    entry_selector) of the list), and its canonical args as a slice of one bytes
    buffer (``offs[i]:offs[i+1]``). Its CallRecord, call id
    (``prefix + str(row)``) and cache key are made by ``take_call`` when the
    call is admitted; calls are taken in row order. ``base`` (the task index of
    row 0) and ``batch`` are set when the block is registered with its task."""

    if not cython.compiled:
        __slots__ = ("prefix", "batch_idx", "n", "pos", "base", "fns", "fidx", "args", "offs",
                     "batch", "_fv", "_ov")

    def __init__(self, prefix, batch_idx: cython.Py_ssize_t, fns: list, fidx, args: bytes, offs):
        # take_call reads fidx and offs as C arrays: a block made here (not by
        # make_block) is checked in full, once.
        if (type(fidx) is not array or fidx.typecode != "I" or type(offs) is not array
                or offs.typecode != "q" or len(offs) != len(fidx) + 1):
            raise TypeError("CallBlock needs fidx = array('I') and offs = array('q') of one more")
        if not _block_in_range(fidx, offs, len(fns), len(args)):
            raise ValueError("CallBlock: fidx or offs out of range")
        _init_block(self, prefix, batch_idx, fns, fidx, args, offs)

    def __len__(self):
        return self.n


def _block_in_range(fidx, offs, nfns, nargs):
    # offs starts at 0, never decreases and ends at len(args); every fidx < len(fns).
    f: cython.uint[::1] = fidx
    o: cython.longlong[::1] = offs
    n: cython.Py_ssize_t = len(fidx)
    j: cython.Py_ssize_t
    if o[0] != 0 or o[n] != nargs:
        return False
    for j in range(n):
        if f[j] >= nfns or o[j] > o[j + 1]:
            return False
    return True


def _init_block(self, prefix, batch_idx, fns, fidx, args, offs):
    self.prefix = prefix
    self.batch_idx = batch_idx
    self.n = len(fidx)
    self.pos = 0                    # rows before pos have been taken
    self.base = 0
    self.fns = fns
    self.fidx = fidx                # array('I'): row -> index into fns
    self.args = args                # every row's args_json, concatenated
    self.offs = offs                # array('q') of n + 1 offsets into args
    self.batch = None
    self._fv = fidx
    self._ov = offs
    return 0


def make_block(task_id: str, prefix: str, calls, batch_idx: cython.Py_ssize_t):
    """The compact queued form of one call list, validated like ``make_calls``
    (same specs, same errors); ids and keys come later, at admission."""
    fns: list = []
    table: dict = {}
    fidx: carray.array = array("I")
    offs: carray.array = array("q", [0])
    parts: list = []
    size: cython.longlong = 0
    i: cython.Py_ssize_t = 0
    k: cython.uint = 0
    spec_t: tuple
    last_fid = last_digest = last_entry = None
    for spec in calls:
        # PinnedCall is a NamedTuple: a tuple subclass, read as a tuple.
        if isinstance(spec, tuple) and len(spec) == 4:
            spec_t = cython.cast(tuple, spec)
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
        parts.append(args_json)
        size += len(args_json)
        if cython.compiled:
            # array.append without a Python call: grow in place, write the C slot.
            carray.resize_smart(fidx, i + 1)
            fidx.data.as_uints[i] = k
            carray.resize_smart(offs, i + 2)
            offs.data.as_longlongs[i + 1] = size
        else:
            fidx.append(k)
            offs.append(size)
        i += 1
    block: CallBlock = CallBlock.__new__(CallBlock)
    _init_block(block, prefix, batch_idx, fns, fidx, b"".join(parts), offs)
    return block


def _take(task, by_id):
    block: CallBlock = task.blocks[0]
    i: cython.Py_ssize_t = block.pos
    block.pos = i + 1
    if block.pos == block.n:
        task.blocks.popleft()
    fn: tuple = block.fns[block._fv[i]]
    function_id = fn[0]
    digest = fn[1]
    a: cython.longlong = block._ov[i]
    b: cython.longlong = block._ov[i + 1]
    args_json = block.args[a:b]
    call_id = f"{block.prefix}{i}"
    ctx: CallRecord = _new_context(call_id, function_id, digest, fn[2], args_json,
                                   cache_key_c(function_id, digest, args_json), block.base + i,
                                   block.batch_idx)
    ctx.task = task
    task.queued -= 1
    task.pending[call_id] = ctx
    batch: Batch = block.batch
    batch.calls.append(ctx)
    by_id[call_id] = ctx
    return ctx


def take_call(task: TaskCalls, by_id: dict):
    """Admit the task's next never-admitted queued call: build its context (id,
    cache key, task index), list it in pending, its batch and the call table.
    The caller knows ``task.queued > 0``."""
    return _take(task, by_id)


@cython.final
@cython.cclass
class Batch:
    if not cython.compiled:
        __slots__ = ("idx", "calls", "remaining")

    def __init__(self, idx: cython.Py_ssize_t, calls):
        self.idx = idx
        self.calls = calls          # roots of the batch as they are admitted, and subcalls
        self.remaining = len(calls)  # roots not yet DONE (the register sets it for a block)


@cython.final
@cython.cclass
class InstanceState:
    if not cython.compiled:
        __slots__ = ("instance_id", "ring", "inflight", "last_served", "tasks")

    def __init__(self, instance_id):
        self.instance_id = instance_id
        self.ring = deque()          # deque of TaskCalls records that may be dispatchable
        self.inflight = 0            # root calls RUNNING/WAITING across the group's tasks
        self.last_served = 0         # scheduler sequence of the group's latest bind
        self.tasks = 0               # registered tasks in the group


# The TaskScheduler's rules are in blockx/core/dispatch/fairness.py (it re-exports it).
@cython.final
@cython.cclass
class TaskScheduler:
    if not cython.compiled:
        __slots__ = ("_fair", "_quantum", "_window", "_instances", "_single", "_current", "_left",
                     "_seq")

    def __init__(self, fair, quantum: cython.Py_ssize_t, window: cython.Py_ssize_t):
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
        inst: InstanceState
        if not self._fair:
            inst = self._single
        else:
            inst = self._instances.get(instance_id)
            if inst is None:
                inst = self._instances[instance_id] = InstanceState(instance_id)
        inst.tasks += 1
        return inst

    def detach(self, task: TaskCalls):
        inst: InstanceState = task.instance
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

    def wake(self, task):
        if not task.in_ring and not task.removed:
            task.in_ring = True
            task.instance.ring.append(task)
        return None

    def next_task(self):
        """The task to admit from next, or None when no task can take a call."""
        window: cython.Py_ssize_t = self._window
        t: TaskCalls
        inst: InstanceState
        if not self._fair:
            ring = self._single.ring
            while ring:
                t = ring[0]
                if (ready_len(t.ready) or t.queued) and not t.stop_dispatching and t.inflight < window:
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
                t = ring[0]
                if (ready_len(t.ready) or t.queued) and not t.stop_dispatching and t.inflight < window:
                    return t
                ring.popleft()
                t.in_ring = False

    def _pick(self):
        best: InstanceState = None
        inst: InstanceState
        for i in self._instances.values():
            inst = i
            if not inst.ring:
                continue
            if (best is None or inst.inflight < best.inflight
                    or (inst.inflight == best.inflight
                        and (inst.last_served < best.last_served
                             or (inst.last_served == best.last_served
                                 and inst.instance_id < best.instance_id)))):
                best = inst
        return best

    def served(self, task):
        """task (the ring head) just got a bind: rotate it and spend quantum."""
        inst: InstanceState = task.instance
        self._seq += 1
        inst.last_served = self._seq
        ring = inst.ring
        if len(ring) > 1 and ring[0] is task:
            ring.rotate(-1)
        self._left -= 1
        return None

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
@cython.cclass
class TaskCalls:
    """The calls of one task and what the dispatcher decided about them."""

    if not cython.compiled:
        __slots__ = (
            "task_id", "fast_fail", "max_attempts", "base_backoff_ms", "jitter_percent",
            "instance", "streaming", "ready", "blocks", "queued", "inflight", "pending", "total",
            "outputs", "output_bytes", "cache", "flights", "batches", "settle_ready",
            "next_batch_idx", "unsettled", "production_open", "stop_dispatching", "stop_reason",
            "stop_sent", "failure_code", "failure_message", "failure_retryable",
            "discard_outputs", "converged", "removed", "in_ring", "dirty", "succeeded",
            "calls_failed", "call_retries", "cache_hits", "first_failure", "failures_retryable",
        )

    def __init__(self, task_id, fast_fail, max_attempts, base_backoff_ms, jitter_percent,
                 instance: InstanceState, streaming, ready):
        self.task_id = task_id
        self.fast_fail = fast_fail
        self.max_attempts = max_attempts
        self.base_backoff_ms = base_backoff_ms
        self.jitter_percent = jitter_percent
        self.instance = instance                 # InstanceState (fairness bucket)
        self.streaming = streaming
        self.ready = ready                       # ReadyQueue of READY roots with a context
        self.blocks = deque()                    # CallBlocks with roots never admitted, in order
        self.queued = 0                          # roots in blocks (they come after ready's)
        self.inflight = 0                        # roots RUNNING or WAITING
        self.pending = {}                        # roots not yet DONE, by call id
        self.total = 0                           # roots committed (TotalCount)
        self.outputs = []                        # by root index; None = no output
        self.output_bytes = 0
        self.cache = {}                          # CallCache: key -> successful output
        self.flights = {}                        # Singleflight: key -> leader root
        self.batches = {}
        self.settle_ready = []                   # batches whose roots are all DONE
        self.next_batch_idx = 0
        self.unsettled = 0                       # committed batches not yet settled
        self.production_open = streaming         # producer may still commit batches
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
        self.succeeded = 0                       # roots DONE with an output
        self.calls_failed = 0                    # roots that failed (not drained / cancelled)
        self.call_retries = 0
        self.cache_hits = 0
        self.first_failure = ""                  # description of the first root failure
        self.failures_retryable = True           # every root failure so far was retryable


@cython.final
@cython.cclass
class ExecutorRecord:
    if not cython.compiled:
        __slots__ = ("view", "heartbeat_seq", "heartbeat_runnable", "completions", "calls",
                     "attached")

    def __init__(self, view):
        self.view = view
        self.heartbeat_seq = -1
        self.heartbeat_runnable = 0
        self.completions = 0                # completions seen since heartbeat_seq
        self.calls = {}                     # call_id -> CallRecord bound here
        self.attached = True


def _join(leader, waiter):
    waiter.leader = leader
    if leader.waiters is None:
        leader.waiters = [waiter]
    else:
        leader.waiters.append(waiter)
    task: TaskCalls = waiter.task
    task.cache_hits += 1
    return 0


def link_calls(task: TaskCalls, calls: list, by_id: dict):
    """TaskCallTable.register's per-call part: the committed calls join their task's
    pending roots and ready queue, and the call table."""
    ctx: CallRecord
    pending: dict = task.pending
    ready: ReadyQueue = task.ready
    for c in calls:
        ctx = c
        ctx.task = task
        pending[ctx.call_id] = ctx
        ready_push(ready, ctx)
        by_id[ctx.call_id] = ctx


def unlink_calls(calls: list, by_id: dict):
    """CallTable.forget's loop: settled (or cancelled) calls leave the call table."""
    ctx: CallRecord
    for c in calls:
        ctx = c
        by_id.pop(ctx.call_id, None)


def join(leader: CallRecord, waiter: CallRecord):
    """Singleflight: waiter takes leader's result (roots of one task only)."""
    _join(leader, waiter)


@cython.final
@cython.cclass
class CallLifecycle:
    """Every call event of the dispatcher, and the one place a call becomes DONE.

    Built last, over the parts built before it (the call table's ``by_id``, the
    TaskCallTable, the TaskScheduler, the ExecutorTable, the SubcallBinder and the
    RetryScheduler); none of them holds a reference back to it. Each event takes
    ``now`` and returns the commands for the adapter, in order. The rules each
    event follows are stated in blockx/core/dispatch/lifecycle.py."""

    if not cython.compiled:
        __slots__ = ("by_id", "tasks", "sched", "ex", "subcalls", "retry", "deadline",
                     "max_output", "on_terminal")

    def __init__(self, by_id: dict, tasks, sched: TaskScheduler, ex, subcalls, retry, deadline,
                 max_output):
        self.by_id = by_id
        self.tasks = tasks
        self.sched = sched
        self.ex = ex
        self.subcalls = subcalls
        self.retry = retry
        self.deadline = deadline
        self.max_output = max_output
        # Called with each context as it enters DONE, before its accounting (tests
        # count transitions with it); None in production.
        self.on_terminal = None

    # --- admission ---------------------------------------------------------------------

    def dispatch(self, now):
        """Admit until nothing more can be: per task the TaskScheduler picks, pop
        a READY root; a cached result completes it at once, a root whose key is
        in flight joins that leader (singleflight); else select an executor
        (Filter -> Score) and emit BindCall, joining the consecutive ready roots
        with the same key."""
        out: list = []
        ctx: CallRecord
        nxt: CallRecord
        lead: CallRecord
        task: TaskCalls
        rec: ExecutorRecord
        view: ExecutorView
        ready: ReadyQueue
        i: cython.Py_ssize_t
        sched: TaskScheduler = self.sched
        ex = self.ex
        views: list = ex.views          # mutated in place only by snapshot events
        recs: list = ex.recs
        sample, max_runnable, max_inflight, mem, stall = ex.select_params()
        # Sampling: each decision's scan starts at a random view (the core's rand).
        sample_start = ex.sample_start if sample > 0 else None
        c_now: cython.longlong = now
        c_run: cython.longlong = max_runnable
        c_inf: cython.longlong = max_inflight
        c_mem: cython.longlong = mem
        c_stall: cython.longlong = stall
        c_sample: cython.Py_ssize_t = sample
        start: cython.Py_ssize_t = 0
        deadline = self.deadline
        by_id: dict = self.by_id
        while True:
            t = sched.next_task()
            if t is None:
                break
            task = t
            ready = task.ready
            ctx = ready_pop(ready) if ready_len(ready) else _take(task, by_id)
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
            # ctx itself leads while retrying; a root never waits on a subcall
            # (a subcall leader gives no attempts of its own to the roots' policy).
            if leader is not None and leader is not ctx:
                lead = leader
                if lead.parent is None:
                    _join(lead, ctx)
                    continue
            if not views:
                i = -1
            else:
                if sample_start is not None:
                    start = sample_start(len(views))
                i = select_index(views, c_now, c_sample, c_run, c_inf, c_mem, c_stall, start)
            if i < 0:
                ready_push_front(ready, ctx)
                sched.unserved()
                break
            rec = recs[i]
            ctx.state = _RUNNING
            ctx.attempt_count += 1
            ctx.bound = False
            ctx.budget_ms = deadline
            view = rec.view
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
                if ready_len(ready):
                    nxt = ready_peek(ready)
                elif task.queued:
                    nxt = _take(task, by_id)
                    ready_push(ready, nxt)
                else:
                    break
                if nxt.key != key:
                    break
                ready_pop(ready)
                if nxt.state == _READY:
                    _join(ctx, nxt)
            sched.served(task)
        return out

    # --- binding -----------------------------------------------------------------------

    def executor_bound(self, call_id, now, executor_id=""):
        """The adapter reserved a context for call_id: send it (DispatchCallCmd).
        With ``executor_id`` given, a bind the core no longer wants (the call was
        cancelled meanwhile) is answered with UnbindCall so the reservation is
        not leaked."""
        ctx: CallRecord
        c = self.by_id.get(call_id)
        if c is None:
            if executor_id:
                return [new_unbind_call(call_id, executor_id)]
            return []
        ctx = c
        if (ctx.state != _RUNNING or ctx.bound
                or (executor_id and ctx.executor_id != executor_id)):
            if executor_id and (ctx.state == _READY or ctx.state == _DONE
                                or ctx.executor_id != executor_id):
                return [new_unbind_call(call_id, executor_id)]
            return []
        ctx.bound = True
        parent = ctx.parent
        parent_id = parent.call_id if parent is not None else ""
        task: TaskCalls = ctx.task
        out: list = [new_dispatch_call(call_id, ctx.executor_id, task.task_id, ctx.function_id,
                                       ctx.digest, ctx.entry_selector, ctx.args_json,
                                       ctx.budget_ms, ctx.attempt_count, parent_id)]
        if ctx.children:
            self.subcalls.bind_children(ctx, out)
        return out

    def bind_failed(self, call_id, now):
        """The adapter could not reserve the context. A root is re-queued at once
        (ArmCallRetry(now, is_retry=False)) without consuming an attempt; a
        subcall is parked."""
        ctx: CallRecord
        c = self.by_id.get(call_id)
        if c is None:
            return []
        ctx = c
        if ctx.state != _RUNNING or ctx.bound:
            return []
        out: list = []
        self._bind_failed(ctx, now, out)
        return out

    def _bind_failed(self, ctx, now, out):
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
            if ctx.waiters:
                self._release_subcall_waiters(ctx, out)
        return 0

    # --- waits ----------------------------------------------------------------------------

    def call_waiting(self, call_id, attempt_seq, now):
        """A CallWaiting (io / subcall) of the current, bound attempt: RUNNING -> WAITING."""
        ctx: CallRecord
        c = self.by_id.get(call_id)
        if c is not None:
            ctx = c
            if ctx.state == _RUNNING and ctx.bound and ctx.attempt_count == attempt_seq:
                ctx.state = _WAITING
        return []

    def call_resumed(self, call_id, now):
        """Its ResumeCall was written: WAITING -> RUNNING."""
        ctx: CallRecord
        c = self.by_id.get(call_id)
        if c is not None:
            ctx = c
            if ctx.state == _WAITING:
                ctx.state = _RUNNING
        return []

    # --- subcalls ---------------------------------------------------------------------------

    def add_subcall(self, parent_call_id, requesting_executor_id, request_id, function_id,
                    digest, args_json, granted_budget_ms, now=0, entry_selector="main"):
        """Register a subcall of ``parent_call_id``: ``(child_call_id, commands)``,
        or ``(SubcallRejected, [])`` when the SubcallBinder refuses it. A result
        in the task's cache answers it at once (CompleteCallFromCache, then
        SubcallDone); a call of the task with its key in flight makes it wait
        (no command: the leader's end answers it the same way); otherwise it
        leads its key and binds beside its parent or is parked.
        ``args_json`` must be canonical (cachekey.canonical_args_json)."""
        child: CallRecord
        task: TaskCalls
        c = self.subcalls.new_child(parent_call_id, requesting_executor_id, request_id,
                                    function_id, digest, args_json, granted_budget_ms,
                                    entry_selector)
        if type(c) is SubcallRejected:
            return c, []
        child = c
        out: list = []
        task = child.task
        cached = task.cache.get(child.key)
        if cached is not None:
            task.cache_hits += 1
            out.append(CompleteCallFromCache(child.call_id, task.task_id, True, parent_call_id))
            self._set_terminal(child, True, cached, "", "", False, 0, True, out, True)
            return child.call_id, out
        self.subcalls.attach(child, out)
        return child.call_id, out

    def cancel_subtree(self, parent: CallRecord, reason, out: list):
        """Cancel every active descendant of parent, without resuming it."""
        self._cancel_subtree(parent, reason, out)

    def _cancel_subtree(self, parent, reason, out):
        child: CallRecord
        st: cython.int
        children = parent.children
        if not children:
            return 0
        parent.children = None
        tasks = self.tasks
        for c in list(children.values()):
            child = c
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
        """A CallCompleted frame. Accepted (the current, bound attempt): the
        commands start with UnbindCall(call_id). Stale or duplicated: []."""
        ctx: CallRecord
        rec: ExecutorRecord
        view: ExecutorView
        task: TaskCalls
        c = self.by_id.get(call_id)
        if c is None:
            return []
        ctx = c
        st: cython.int = ctx.state
        if (st != _RUNNING and st != _WAITING) or not ctx.bound or ctx.attempt_count != attempt_seq:
            return []
        if type(output_json) is not bytes:
            output_json = bytes(output_json)
        rec = ctx.exec
        out: list = [new_unbind_call(call_id, ctx.executor_id)]
        rec.completions += 1
        view = rec.view
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
                task = ctx.task
                task.inflight -= 1
                task.instance.inflight -= 1
                if (ready_len(task.ready) or task.queued) and not task.in_ring:
                    self.sched.wake(task)
                if task.stop_dispatching:
                    tasks.mark_dirty(task)
        else:
            tasks.release(ctx)
        self._set_terminal(ctx, True, output_json, "", "", False, budget_used_ms, True, out, True)
        return out

    def call_failed(self, call_id, attempt_seq, error_kind, retryable, message, now,
                    budget_used_ms=0):
        """A CallFailed frame (or a failure the adapter synthesized). Accepted:
        the commands start with UnbindCall(call_id). Stale or duplicated: []."""
        ctx: CallRecord
        c = self.by_id.get(call_id)
        if c is None:
            return []
        ctx = c
        st: cython.int = ctx.state
        # Stale: DONE; READY (backing off, or rolled back); another attempt; not yet bound.
        if (st != _RUNNING and st != _WAITING) or not ctx.bound or ctx.attempt_count != attempt_seq:
            return []
        out: list = [new_unbind_call(call_id, ctx.executor_id)]
        self.ex.note_completion(ctx.exec)
        self.tasks.release(ctx)
        if ctx.children:
            self._cancel_subtree(ctx, "parent call attempt failed", out)
        self._attempt_failed(ctx, error_kind, bool(retryable), message, budget_used_ms, now, out)
        return out

    def _attempt_failed(self, ctx, kind, retryable, message, budget_used_ms, now, out):
        if self.retry.may_retry(ctx, retryable):
            ctx.state = _READY
            ctx.bound = False
            ctx.retry_armed = True
            self.retry.arm(ctx, now, out)
            if ctx.waiters:
                self._release_subcall_waiters(ctx, out)
        else:
            self._set_terminal(ctx, False, None, kind, message, retryable, budget_used_ms, True,
                               out, True)
        return 0

    def retry_ready(self, call_id, now):
        """A retry timer (ArmCallRetry) fired: the call goes back to the front of
        its task's queue, unless it no longer waits for that timer."""
        ctx: CallRecord
        task: TaskCalls
        c = self.by_id.get(call_id)
        if c is None:
            return []
        ctx = c
        if ctx.state != _READY or not ctx.retry_armed:
            return []
        ctx.retry_armed = False
        task = ctx.task
        ready_push_front(task.ready, ctx)
        self.sched.wake(task)
        if task.stop_dispatching:
            self.tasks.mark_dirty(task)
        return []

    # --- executors -----------------------------------------------------------------------

    def executor_snapshot(self, snapshots, now):
        """Refresh executor views; retry parked subcalls."""
        self.ex.update(snapshots)
        out: list = []
        self.subcalls.retry_parked(out)
        return out

    def executor_lost(self, executor_id, now, detail=""):
        """Transport lost: every call bound there fails retryably (EXECUTOR_LOST);
        an unconfirmed bind is rolled back instead. Parents go first so their
        subtrees are cancelled rather than failed one by one. ``detail`` (e.g. the
        sandbox limit that killed it) is appended to the calls' message."""
        rec: ExecutorRecord
        ctx: CallRecord
        r = self.ex.records.get(executor_id)
        if r is None:
            return []
        rec = r
        rec.view.healthy = False
        out: list = []
        message = f"executor {executor_id} lost" + (f": {detail}" if detail else "")
        for c in sorted(rec.calls.values(), key=_by_depth):
            ctx = c
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
        """Stop / drain / settle / converge every task changed since the last
        flush (the TaskCallTable's steps; the drain's cancellations end here)."""
        out: list = []
        tasks = self.tasks
        while True:
            dirty = tasks.take_dirty()
            if not dirty:
                return out
            for task in dirty:
                if tasks.stop_production(task, out):
                    self._drain(task, out)
                tasks.settle_and_converge(task, out)

    def _drain(self, task, out):
        """Nothing is in flight in a stopped task: cancel what is left."""
        ctx: CallRecord
        task.ready.clear()
        reason = f"task stopped dispatching: {task.stop_reason}"
        for c in list(task.pending.values()):
            ctx = c
            if ctx.state != _DONE:
                self._set_terminal(ctx, False, None, ERR_CANCELLED, reason, False, 0, False, out,
                                   True)
        by_id: dict = self.by_id
        while task.queued:
            self._set_terminal(_take(task, by_id), False, None, ERR_CANCELLED, reason, False, 0,
                               False, out, True)
        return 0

    def epilogue(self, now):
        """dispatch(now) then flush(now): run after every event batch."""
        out: list = self.dispatch(now)
        out.extend(self.flush(now))
        return out

    # --- teardown ------------------------------------------------------------------------

    def cancel_task(self, task_id, reason, now):
        """The task ended (terminal elsewhere: timeout, watch loss, shutdown).
        Every call still in flight is cancelled (CancelCallCmd), including whole
        subcall subtrees, and the task's state is dropped. No ConvergeTaskCalls
        follows. Unknown tasks are ignored."""
        task: TaskCalls
        ctx: CallRecord
        st: cython.int
        tasks = self.tasks
        out: list = []
        t = tasks.remove(task_id, reason, out)
        if t is None:
            return out
        task = t
        for c in list(task.pending.values()):
            ctx = c
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
        b: Batch
        for bb in task.batches.values():
            b = bb
            for c in b.calls:
                ctx = c
                if ctx.parked:
                    unpark(c)
        tasks.forget(task)
        return out

    def remove_task(self, task_id):
        """Forget a task (normally after it converged, when nothing is in flight;
        anything still in flight is cancelled as by cancel_task)."""
        return self.cancel_task(task_id, "task removed", 0)

    # --- terminal accounting ---------------------------------------------------------------

    def set_terminal(self, ctx: CallRecord, ok, output, kind, message, retryable, budget_used_ms,
                     counted, out: list, notify=True):
        """The single accounting point for DONE; idempotent. ``counted``: a real
        failure (calls_failed, FAST_FAIL) rather than a drain or cancellation.
        ``notify``: a subcall resumes its parent (SubcallDone)."""
        self._set_terminal(ctx, ok, output, kind, message, retryable, budget_used_ms, counted,
                           out, notify)

    @cython.boundscheck(True)
    @cython.wraparound(True)
    def _set_terminal(self, ctx, ok, output, kind, message, retryable, budget_used_ms, counted,
                      out, notify):
        task: TaskCalls
        parent: CallRecord
        w: CallRecord
        batch: Batch
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
        task = ctx.task
        if ctx.parent is not None:
            parent = ctx.parent
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
            if ctx.leader is not None:
                # A waiter that ends first (its parent ended): its leader forgets it.
                w = ctx.leader
                ctx.leader = None
                if w.waiters:
                    try:
                        w.waiters.remove(ctx)
                    except ValueError:
                        pass
            key = ctx.key
            if task.flights.get(key) is ctx:
                del task.flights[key]
            if ctx.waiters:
                self._settle_waiters(ctx, ok, output, kind, message, retryable, counted, out)
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
        if ctx.waiters:
            self._settle_waiters(ctx, ok, output, kind, message, retryable, counted, out)
        batch = task.batches[ctx.batch_idx]
        batch.remaining -= 1
        if batch.remaining == 0:
            task.settle_ready.append(batch)
        if not task.dirty:
            self.tasks.mark_dirty(task)
        return 0

    # --- singleflight -----------------------------------------------------------------------

    def _settle_waiters(self, ctx, ok, output, kind, message, retryable, counted, out):
        """ctx, a leader, is DONE: its waiters end with its result. Roots wait on
        roots only and take any result, as ever. A subcall waiter takes a result
        the function gave (an output; a final root failure; a subcall's failure
        that is not retryable); when the leader ended without one (cancelled with
        its parent or its task's drain, or a retryable failure of its one
        attempt), the subcall waiters are handed over instead (``_hand_off``)."""
        w: CallRecord
        task: TaskCalls = ctx.task
        waiters: list = ctx.waiters
        ctx.waiters = None
        deliver: cython.bint = ok or (counted and (ctx.parent is None or not retryable))
        moved: list = None
        for ww in waiters:
            w = ww
            if w.parent is None:
                self._set_terminal(w, ok, output, kind, message, retryable, 0, counted, out, True)
            elif deliver:
                w.leader = None
                if w.state != _DONE:
                    out.append(CompleteCallFromCache(w.call_id, task.task_id, True,
                                                     w.parent.call_id))
                    self._set_terminal(w, ok, output, kind, message, retryable, 0, counted, out,
                                       True)
            else:
                if moved is None:
                    moved = []
                moved.append(w)
        if moved is not None:
            self._hand_off(ctx, moved, out)
        return 0

    def _release_subcall_waiters(self, ctx, out):
        """A root leader went back to READY (a retry, a failed bind): its root
        waiters stay, its subcall waiters do not wait on a call that may not run
        again (its task may stop dispatching meanwhile)."""
        w: CallRecord
        stay: list = []
        moved: list = []
        for ww in ctx.waiters:
            w = ww
            if w.parent is None:
                stay.append(w)
            else:
                moved.append(w)
        if moved:
            ctx.waiters = stay if stay else None
            self._hand_off(ctx, moved, out)
        return 0

    def _hand_off(self, leader, moved, out):
        """Subcall waiters whose leader will not answer them: a result cached
        meanwhile answers them; else the first whose parent still runs leads in
        its place (it binds beside its own parent, and no longer counts as a
        cache hit) and the others wait on it. A waiter whose parent is ending is
        left to that parent's subtree cancellation, as is every waiter of a
        task being cancelled."""
        w: CallRecord
        p: CallRecord
        first: CallRecord = None
        task: TaskCalls = leader.task
        for ww in moved:
            w = ww
            w.leader = None
        if task.removed:
            return 0
        key = leader.key
        cached = task.cache.get(key)
        for ww in moved:
            w = ww
            if w.state == _DONE:
                continue
            p = w.parent
            siblings = p.children
            if (p.state != _RUNNING and p.state != _WAITING) or not siblings \
                    or w.call_id not in siblings:
                continue
            if cached is not None:
                out.append(CompleteCallFromCache(w.call_id, task.task_id, True, p.call_id))
                self._set_terminal(w, True, cached, "", "", False, 0, True, out, True)
            elif first is None:
                first = w
                task.cache_hits -= 1
            else:
                w.leader = first
                if first.waiters is None:
                    first.waiters = [w]
                else:
                    first.waiters.append(w)
        if first is not None:
            if task.flights.get(key) is None:
                task.flights[key] = first
            self.subcalls.try_bind(first, out)
        return 0
