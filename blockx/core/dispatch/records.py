"""The dispatcher's records: one per call (CallRecord), per compact call list
(CallBlock), per batch (Batch), per fairness group (InstanceState), per task
(TaskCalls) and per executor (ExecutorRecord); the call states, declared once
here, and the one guarded way to change a call's state (``set_state``).

Rules and theory of operation:
- A call's state is READY, RUNNING, WAITING or DONE; DONE is terminal. Every
  change goes through ``set_state``: interpreted (BLOCKX_NO_EXTENSIONS=1) it
  refuses a change that ``TRANSITIONS`` does not list (``StateTransitionError``)
  and, while ``record_transitions`` is on, notes each one (the test that every
  transition the suites make is in the table reads it); compiled it is an
  inline store (records.pxd). Which event makes which change is the
  lifecycle's (blockx/core/dispatch/lifecycle.py).
- RUNNING starts when the core emits BindCall (``bound`` turns true on
  handle_executor_bound); a retry reuses the same seat and call id and only
  increments ``attempt_count`` (the attempt seq the executor echoes), so late
  frames of an older attempt are told apart by that number.
- A READY call is in exactly one place: its task's ready queue, the waiter
  list of a singleflight leader (``leader`` set; a subcall waiter is also
  listed under its parent), the retry timer (``retry_armed``), or, for
  subcalls, the SubcallBinder's parking (``parked``).
- A root gets its record when it is admitted (``take_call`` makes it from the
  task's compact queue, a CallBlock); ``make_calls`` builds a whole list of
  them (for tests and tools). Both validate a spec the same way.
- The records are plain state: the part that owns each documents it
  (calls: CallTable; tasks: TaskCallTable; fairness: TaskScheduler;
  executors: ExecutorTable), and only the core touches them.
Rules: Sans-IO like the core; both forms take and return the same values and
raise the same errors.

Made per call on the hot path: one source in Cython's pure-Python mode,
compiled with records.pxd (cdef classes whose fields the loop reads and writes
in C; a freelist for CallRecord) and interpreted under BLOCKX_NO_EXTENSIONS=1
(``__slots__`` classes). Object fields take part in the cyclic GC (a call
points at its task, which lists the call).
"""
from __future__ import annotations

from array import array
from collections import deque
from typing import TYPE_CHECKING, Any

import cython

if not cython.compiled and TYPE_CHECKING:
    # The C types of the annotations (compiled, records.pxd cimports them).
    import array as carray

    from blockx._fast.readyqueue_py import ReadyQueue
    from blockx._fast.scoring_py import ExecutorView

if not cython.compiled:
    # Compiled, records.pxd cimports these names from the hot paths.
    from blockx._fast import load

    cache_key_c = load("cachekey").cache_key

    def ready_push(q, item):
        q.push(item)

# A call's states, by value: the Python names here, and the same values as the
# C constants _READY ... _DONE of records.pxd (the compiled loop compares in C).
READY = 0
RUNNING = 1
WAITING = 2
DONE = 3
STATE_NAMES = ("READY", "RUNNING", "WAITING", "DONE")
if not cython.compiled:
    _READY, _RUNNING, _WAITING, _DONE = READY, RUNNING, WAITING, DONE

# Every change of a call's state the lifecycle and the SubcallBinder may make:
#   READY -> RUNNING    bound (dispatch, a subcall beside its parent)
#   RUNNING -> READY    the bind failed (rolled back), or a failed attempt retries
#   WAITING -> READY    a failed attempt retries while the call waited
#   RUNNING <-> WAITING CallWaiting / its ResumeCall written
#   * -> DONE           terminal accounting, a cancelled subtree or task
TRANSITIONS = frozenset({
    (READY, RUNNING), (RUNNING, READY), (WAITING, READY), (RUNNING, WAITING),
    (WAITING, RUNNING), (READY, DONE), (RUNNING, DONE), (WAITING, DONE),
})

__all__ = ["CallRecord", "make_calls", "READY", "RUNNING", "WAITING", "DONE", "STATE_NAMES",
           "TRANSITIONS", "StateTransitionError", "checked_set_state", "record_transitions",
           "Batch", "TaskCalls", "InstanceState", "ExecutorRecord", "link_calls", "unlink_calls",
           "CallBlock", "make_block", "take_call", "join"]


class StateTransitionError(RuntimeError):
    """A call's state change that TRANSITIONS does not allow (a dispatcher bug)."""


# (old, new) pairs seen by the interpreted setter while recording (tests); None = off.
_seen: set[tuple[int, int]] | None = None


def record_transitions(on: bool = True):
    """Start (or stop) noting the state changes the interpreted setter makes; the
    set of (old, new) pairs seen since the start. Compiled, nothing is noted."""
    global _seen
    if on:
        _seen = set()
        return _seen
    seen, _seen = _seen, None
    return seen if seen is not None else set()


def checked_set_state(call, state):
    """``set_state`` as the interpreted form runs it: refuses a change not in
    TRANSITIONS, notes it while recording. (Defined in both forms, so an
    interpreted part beside compiled records checks its changes too.)"""
    old = call.state
    if (old, state) not in TRANSITIONS:
        raise StateTransitionError(
            f"call {call.call_id}: {STATE_NAMES[old]} -> {STATE_NAMES[state]} is not an "
            f"allowed state change")
    if _seen is not None:
        _seen.add((old, state))
    call.state = state


if not cython.compiled:
    # Compiled, set_state is records.pxd's inline store.
    set_state = checked_set_state

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
        # The back-pointers (compiled: object fields of records.pxd).
        task: TaskCalls | None
        exec: ExecutorRecord | None
        parent: CallRecord | None
        children: dict[str, CallRecord] | None
        waiters: list[CallRecord] | None
        leader: CallRecord | None

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


def _new_call(call_id, function_id, digest, entry_selector, args_json, key, index, batch_idx):
    # The one place a root's context is made (make_calls, and _take at admission).
    # Compiled, CallRecord.__init__ without a Python call: the fields __new__ does
    # not already hold (NULL objects are None, C fields 0).
    if not cython.compiled:
        return CallRecord(call_id, function_id, digest, entry_selector, args_json, key, index,
                          batch_idx)
    call: CallRecord = CallRecord.__new__(CallRecord)
    call.call_id = call_id
    call.task = None
    call.index = index
    call.batch_idx = batch_idx
    call.function_id = function_id
    call.digest = digest
    call.entry_selector = entry_selector
    call.args_json = args_json
    call.key = key
    call.executor_id = ""
    call.budget_ms = 0
    call.request_id = ""
    call.error_kind = ""
    call.error_message = ""
    call.retryable = False
    call.budget_used_ms = 0
    return call


def make_calls(task_id: str, prefix: str, calls, batch_idx: cython.Py_ssize_t):
    """The contexts of one call list: ids ``prefix + str(i)``, cache keys by
    cachekey. Each spec is (function_id, digest, args_json, entry_selector)
    with canonical args_json bytes; an invalid spec raises ValueError naming it."""
    out: list = []
    i: cython.Py_ssize_t = 0
    for spec in calls:
        function_id, digest, args_json, entry_selector = _check_spec(task_id, i, spec)
        out.append(_new_call(f"{prefix}{i}", function_id, digest, entry_selector or "main",
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
        prefix: str
        n: int
        pos: int

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
            carray.resize_smart(fidx, i + 1)  # type: ignore[attr-defined]
            fidx.data.as_uints[i] = k  # type: ignore[attr-defined]
            carray.resize_smart(offs, i + 2)  # type: ignore[attr-defined]
            offs.data.as_longlongs[i + 1] = size  # type: ignore[attr-defined]
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
    call: CallRecord = _new_call(call_id, function_id, digest, fn[2], args_json,
                                   cache_key_c(function_id, digest, args_json), block.base + i,
                                   block.batch_idx)
    call.task = task
    task.queued -= 1
    task.pending[call_id] = call
    batch: Batch = block.batch
    batch.calls.append(call)
    by_id[call_id] = call
    return call


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
        blocks: deque[CallBlock]
        pending: dict[str, CallRecord]
        outputs: list[bytes | None]
        cache: dict[bytes, bytes]
        flights: dict[bytes, CallRecord]
        batches: dict[int, Batch]
        settle_ready: list[Batch]

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
        calls: dict[str, CallRecord]

    def __init__(self, view):
        self.view = view
        self.heartbeat_seq = -1
        self.heartbeat_runnable = 0
        self.completions = 0                # completions seen since heartbeat_seq
        self.calls = {}                     # call_id -> CallRecord bound here
        self.attached = True

    def bind(self, call: CallRecord):
        """A seat here for call (ExecutorTable's bind: the loop and the SubcallBinder
        call it in C): counted in local_inflight, listed in calls, and the call's
        exec / executor_id set."""
        view: ExecutorView = self.view
        view.local_inflight += 1
        self.calls[call.call_id] = call
        call.exec = self
        call.executor_id = view.executor_id
        return 0


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
    call: CallRecord
    pending: dict = task.pending
    ready: ReadyQueue = task.ready
    for c in calls:
        call = c
        call.task = task
        pending[call.call_id] = call
        ready_push(ready, call)
        by_id[call.call_id] = call


def unlink_calls(calls: list, by_id: dict):
    """CallTable.forget's loop: settled (or cancelled) calls leave the call table."""
    call: CallRecord
    for c in calls:
        call = c
        by_id.pop(call.call_id, None)


def join(leader: CallRecord, waiter: CallRecord):
    """Singleflight: waiter takes leader's result (roots of one task only)."""
    _join(leader, waiter)
