"""The DispatcherCore's per-call records and its call lifecycle; pure-Python twin of
dispatchloop.pyx (test oracle and benchmark baseline).

What it holds:
- the records the core's parts keep per call, task, batch, instance and
  executor (CallRecord, TaskCalls, Batch, InstanceState, ExecutorRecord): plain
  state, owned and documented by the core module that uses each
  (blockx/core/dispatch: calls, tasks, fairness, executors);
- ``make_calls``, which validates one call list and builds its contexts, and
  ``make_block``, which validates one call list into its compact queued form, a
  CallBlock (no side effects, so the core may run either off its actor);
- ``take_call``, which turns a task's next never-admitted queued call into its
  CallRecord (the only place a queued call gets one);
- ``CallLifecycle``, every call event of the DispatcherCore and its terminal
  accounting, over the core's parts, which it is given at construction; the
  events and their rules are stated in blockx/core/dispatch/lifecycle.py.
Rules: Sans-IO like the core (no clock, no IO, randomness only from the core's
injected ``rand``, through ExecutorTable.sample_start); both
implementations take and return the same values and raise the same errors.
"""
from __future__ import annotations

from array import array
from collections import deque
from typing import Any, Callable, Iterable
from operator import attrgetter

from blockx.core.dispatch.commands import (
    BindCall, CancelCallCmd, CompleteCallFromCache, DispatchCallCmd, SubcallDone, UnbindCall)
from blockx.core.dispatch.types import (
    CALL_FAILED, ERR_CANCELLED, ERR_EXECUTOR_LOST, ERR_SUBCALL_FAILED, SubcallRejected)

READY = 0
RUNNING = 1
WAITING = 2
DONE = 3
STATE_NAMES = ("READY", "RUNNING", "WAITING", "DONE")
_by_depth = attrgetter("depth")

__all__ = ["CallRecord", "make_calls", "READY", "RUNNING", "WAITING", "DONE", "STATE_NAMES",
           "Batch", "TaskCalls", "InstanceState", "ExecutorRecord", "CallLifecycle", "link_calls", "unlink_calls", "TaskScheduler",
           "CallBlock", "make_block", "take_call"]


class CallRecord:
    __slots__ = (
        "call_id", "task", "index", "batch_idx", "function_id", "digest", "entry_selector",
        "args_json", "key", "state", "executor_id", "exec", "bound", "attempt_count",
        "budget_ms", "parent", "depth", "request_id", "children", "waiters", "leader",
        "retry_armed", "parked", "ok", "output", "error_kind", "error_message",
        "retryable", "budget_used_ms",
    )

    def __init__(self, call_id: str, function_id: str, digest: str, entry_selector: str,
                 args_json: bytes, key: bytes, index: int, batch_idx: int) -> None:
        self.call_id = call_id
        self.task: Any = None           # TaskCalls, set at commit
        self.index = index              # position among the task's roots; -1 for subcalls
        self.batch_idx = batch_idx
        self.function_id = function_id
        self.digest = digest
        self.entry_selector = entry_selector
        self.args_json = args_json
        self.key = key
        self.state = READY
        self.executor_id = ""
        self.exec: Any = None           # ExecutorRecord while bound (counted in local_inflight)
        self.bound = False
        self.attempt_count = 0
        self.budget_ms = 0
        self.parent: CallRecord | None = None
        self.depth = 0
        self.request_id = ""
        self.children: dict[str, CallRecord] | None = None   # active subcalls
        self.waiters: list[CallRecord] | None = None         # singleflight waiters (leader only)
        self.leader: CallRecord | None = None                # set on a waiter
        self.retry_armed = False
        self.parked = False
        self.ok = False
        self.output: bytes | None = None
        self.error_kind = ""
        self.error_message = ""
        self.retryable = False
        self.budget_used_ms = 0

    def __repr__(self) -> str:
        return (f"<CallRecord {self.call_id} {STATE_NAMES[self.state]} "
                f"attempt={self.attempt_count} executor={self.executor_id!r}>")


def make_calls(task_id: str, prefix: str, calls: Iterable, batch_idx: int,
               cache_key: Callable[[str, str, bytes], bytes]) -> list:
    """The contexts of one call list: ids ``prefix + str(i)``, cache keys by
    ``cache_key``. Each spec is (function_id, digest, args_json, entry_selector)
    with canonical args_json bytes; an invalid spec raises ValueError naming it."""
    out: list[CallRecord] = []
    append = out.append
    for i, spec in enumerate(calls):
        function_id, digest, args_json, entry_selector = _check_spec(task_id, i, spec)
        append(CallRecord(f"{prefix}{i}", function_id, digest, entry_selector or "main",
                           args_json, cache_key(function_id, digest, args_json), i, batch_idx))
    return out


def _check_spec(task_id: str, i: int, spec: Any) -> tuple:
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


class CallBlock:
    """The compact queued form of one committed call list (a one-shot phase or one
    streaming batch): calls that were never admitted hold no object of their own.

    Per call it keeps an index into ``fns`` (the distinct (function_id, digest,
    entry_selector) of the list), and its canonical args as a slice of one bytes
    buffer (``offs[i]:offs[i+1]``). Its CallRecord, call id
    (``prefix + str(row)``) and cache key are made by ``take_call`` when the
    call is admitted; calls are taken in row order. ``base`` (the task index of
    row 0) and ``batch`` are set when the block is registered with its task."""

    __slots__ = ("prefix", "batch_idx", "n", "pos", "base", "fns", "fidx", "args", "offs",
                 "cache_key", "batch")

    def __init__(self, prefix: str, batch_idx: int, fns: list, fidx: Any, args: bytes,
                 offs: Any, cache_key: Callable[[str, str, bytes], bytes]) -> None:
        # The compiled take_call reads fidx and offs as C arrays: a block made here
        # (not by make_block) is checked in full, once.
        if (type(fidx) is not array or fidx.typecode != "I" or type(offs) is not array
                or offs.typecode != "q" or len(offs) != len(fidx) + 1):
            raise TypeError("CallBlock needs fidx = array('I') and offs = array('q') of one more")
        if (offs[0] != 0 or offs[len(fidx)] != len(args) or (len(fidx) and max(fidx) >= len(fns))
                or any(offs[j] > offs[j + 1] for j in range(len(fidx)))):
            raise ValueError("CallBlock: fidx or offs out of range")
        _init_block(self, prefix, batch_idx, fns, fidx, args, offs, cache_key)

    def __len__(self) -> int:
        return self.n


def _init_block(self: CallBlock, prefix: str, batch_idx: int, fns: list, fidx: Any, args: bytes,
                offs: Any, cache_key: Callable[[str, str, bytes], bytes]) -> None:
    self.prefix = prefix
    self.batch_idx = batch_idx
    self.n = len(fidx)
    self.pos = 0                    # rows before pos have been taken
    self.base = 0
    self.fns = fns
    self.fidx = fidx                # array('I'): row -> index into fns
    self.args = args                # every row's args_json, concatenated
    self.offs = offs                # array('q') of n + 1 offsets into args
    self.cache_key = cache_key
    self.batch: Any = None


def make_block(task_id: str, prefix: str, calls: Iterable, batch_idx: int,
               cache_key: Callable[[str, str, bytes], bytes]) -> CallBlock:
    """The compact queued form of one call list, validated like ``make_calls``
    (same specs, same errors); ids and keys come later, at admission."""
    fns: list = []
    table: dict = {}
    fidx = array("I")
    offs = array("q", [0])
    parts: list = []
    size = 0
    i = 0
    for spec in calls:
        function_id, digest, args_json, entry_selector = _check_spec(task_id, i, spec)
        fn = (function_id, digest, entry_selector or "main")
        k = table.get(fn)
        if k is None:
            k = table[fn] = len(fns)
            fns.append(fn)
        fidx.append(k)
        parts.append(args_json)
        size += len(args_json)
        offs.append(size)
        i += 1
    block = CallBlock.__new__(CallBlock)
    _init_block(block, prefix, batch_idx, fns, fidx, b"".join(parts), offs, cache_key)
    return block


def take_call(task: Any, by_id: dict) -> Any:
    """Admit the task's next never-admitted queued call: build its context (id,
    cache key, task index), list it in pending, its batch and the call table.
    The caller knows ``task.queued > 0``."""
    block = task.blocks[0]
    i = block.pos
    block.pos = i + 1
    if block.pos == block.n:
        task.blocks.popleft()
    function_id, digest, entry_selector = block.fns[block.fidx[i]]
    offs = block.offs
    args_json = block.args[offs[i]:offs[i + 1]]
    call_id = f"{block.prefix}{i}"
    ctx = CallRecord(call_id, function_id, digest, entry_selector, args_json,
                      block.cache_key(function_id, digest, args_json), block.base + i,
                      block.batch_idx)
    ctx.task = task
    task.queued -= 1
    task.pending[call_id] = ctx
    block.batch.calls.append(ctx)
    by_id[call_id] = ctx
    return ctx


class Batch:
    __slots__ = ("idx", "calls", "remaining")

    def __init__(self, idx: int, calls: list) -> None:
        self.idx = idx
        self.calls = calls          # roots of the batch as they are admitted, and subcalls
        self.remaining = len(calls)  # roots not yet DONE (the register sets it for a block)


class TaskCalls:
    """The calls of one task and what the dispatcher decided about them."""

    __slots__ = (
        "task_id", "fast_fail", "max_attempts", "base_backoff_ms", "jitter_percent",
        "instance", "streaming", "ready", "blocks", "queued", "inflight", "pending", "total", "outputs",
        "output_bytes", "cache", "flights", "batches", "settle_ready", "next_batch_idx",
        "unsettled", "production_open", "stop_dispatching", "stop_reason", "stop_sent",
        "failure_code", "failure_message", "failure_retryable", "discard_outputs",
        "converged", "removed", "in_ring", "dirty", "succeeded", "calls_failed", "call_retries",
        "cache_hits", "first_failure", "failures_retryable",
    )

    def __init__(self, task_id: str, fast_fail: bool, max_attempts: int, base_backoff_ms: int,
                 jitter_percent: int, instance: Any, streaming: bool, ready: Any) -> None:
        self.task_id = task_id
        self.fast_fail = fast_fail
        self.max_attempts = max_attempts
        self.base_backoff_ms = base_backoff_ms
        self.jitter_percent = jitter_percent
        self.instance = instance                 # InstanceState (fairness bucket)
        self.streaming = streaming
        self.ready = ready                       # ReadyQueue of READY roots with a context
        self.blocks: deque = deque()             # CallBlocks with roots never admitted, in order
        self.queued = 0                          # roots in blocks (they come after ready's)
        self.inflight = 0                        # roots RUNNING or WAITING
        self.pending: dict = {}                  # roots not yet DONE, by call id
        self.total = 0                           # roots committed (TotalCount)
        self.outputs: list = []                  # by root index; None = no output
        self.output_bytes = 0
        self.cache: dict = {}                    # CallCache: key -> successful output
        self.flights: dict = {}                  # Singleflight: key -> leader root
        self.batches: dict = {}
        self.settle_ready: list = []             # batches whose roots are all DONE
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


class InstanceState:
    __slots__ = ("instance_id", "ring", "inflight", "last_served", "tasks")

    def __init__(self, instance_id: str) -> None:
        self.instance_id = instance_id
        self.ring = deque()          # deque of TaskCalls records that may be dispatchable
        self.inflight = 0            # root calls RUNNING/WAITING across the group's tasks
        self.last_served = 0         # scheduler sequence of the group's latest bind
        self.tasks = 0               # registered tasks in the group


# The TaskScheduler's rules are in blockx/core/dispatch/fairness.py (it re-exports it).
class TaskScheduler:
    __slots__ = ("_fair", "_quantum", "_window", "_instances", "_single", "_current", "_left",
                 "_seq")

    def __init__(self, fair: bool, quantum: int, window: int) -> None:
        self._fair = fair
        self._quantum = quantum
        self._window = window
        self._instances: dict[str, InstanceState] = {}
        self._single = InstanceState("")
        self._current: InstanceState | None = None
        self._left = 0
        self._seq = 0

    def attach(self, instance_id: str) -> InstanceState:
        """The group a new task joins."""
        if not self._fair:
            inst = self._single
        else:
            inst = self._instances.get(instance_id)
            if inst is None:
                inst = self._instances[instance_id] = InstanceState(instance_id)
        inst.tasks += 1
        return inst

    def detach(self, task: Any) -> None:
        inst = task.instance
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

    @staticmethod
    def wake(task: Any) -> None:
        if not task.in_ring and not task.removed:
            task.in_ring = True
            task.instance.ring.append(task)

    def next_task(self) -> Any:
        """The task to admit from next, or None when no task can take a call."""
        window = self._window
        if not self._fair:
            ring = self._single.ring
            while ring:
                t = ring[0]
                if (t.ready or t.queued) and not t.stop_dispatching and t.inflight < window:
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
                if (t.ready or t.queued) and not t.stop_dispatching and t.inflight < window:
                    return t
                ring.popleft()
                t.in_ring = False

    def _pick(self) -> InstanceState | None:
        best = None
        for inst in self._instances.values():
            if not inst.ring:
                continue
            if (best is None or inst.inflight < best.inflight
                    or (inst.inflight == best.inflight
                        and (inst.last_served < best.last_served
                             or (inst.last_served == best.last_served
                                 and inst.instance_id < best.instance_id)))):
                best = inst
        return best

    def served(self, task: Any) -> None:
        """task (the ring head) just got a bind: rotate it and spend quantum."""
        inst = task.instance
        self._seq += 1
        inst.last_served = self._seq
        ring = inst.ring
        if len(ring) > 1 and ring[0] is task:
            ring.rotate(-1)
        self._left -= 1

    def unserved(self) -> None:
        """No executor could take the picked instance's call. A turn that has
        not served a bind yet is void: the next round re-selects by the
        then-current in-flight counts. A turn already under way continues."""
        if self._left >= self._quantum:
            self._current = None

    def instance_inflight(self) -> dict[str, int]:
        """instance_id -> root calls in flight (fair mode; for tests/metrics)."""
        if not self._fair:
            return {"": self._single.inflight}
        return {i.instance_id: i.inflight for i in self._instances.values()}


class ExecutorRecord:
    __slots__ = ("view", "heartbeat_seq", "heartbeat_runnable", "completions", "calls", "attached")

    def __init__(self, view: Any) -> None:
        self.view = view
        self.heartbeat_seq = -1
        self.heartbeat_runnable = 0
        self.completions = 0                # completions seen since heartbeat_seq
        self.calls: dict = {}               # call_id -> CallRecord bound here
        self.attached = True


class CallLifecycle:
    """Every call event of the dispatcher, and the one place a call becomes DONE.

    Built last, over the parts built before it (the call table's ``by_id``, the
    TaskCallTable, the TaskScheduler, the ExecutorTable, the SubcallBinder and the
    RetryScheduler); none of them holds a reference back to it. Each event takes
    ``now`` and returns the commands for the adapter, in order. The rules each
    event follows are stated in blockx/core/dispatch/lifecycle.py."""

    __slots__ = ("by_id", "tasks", "sched", "ex", "subcalls", "retry", "deadline", "max_output",
                 "on_terminal")

    def __init__(self, by_id: dict, tasks: Any, sched: Any, ex: Any, subcalls: Any, retry: Any,
                 deadline: int, max_output: int) -> None:
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
        self.on_terminal: Any = None

    # --- admission ---------------------------------------------------------------------

    def dispatch(self, now: int) -> list:
        """Admit until nothing more can be: per task the TaskScheduler picks, pop
        a READY root; a cached result completes it at once, a root whose key is
        in flight joins that leader (singleflight); else select an executor
        (Filter -> Score) and emit BindCall, joining the consecutive ready roots
        with the same key."""
        out: list = []
        sched = self.sched
        next_task = sched.next_task
        served = sched.served
        ex = self.ex
        views = ex.views          # mutated in place only by snapshot events
        recs = ex.recs
        select_fn = ex.select_fn
        sample, max_runnable, max_inflight, mem, stall = ex.select_params()
        # Sampling: each decision's scan starts at a random view (the core's rand).
        sample_start = ex.sample_start if sample > 0 else None
        start = 0
        deadline = self.deadline
        by_id = self.by_id
        while True:
            task = next_task()
            if task is None:
                break
            ready = task.ready
            ctx = ready.pop() if ready else take_call(task, by_id)
            if ctx.state != READY:
                continue
            key = ctx.key
            cached = task.cache.get(key)
            if cached is not None:
                task.cache_hits += 1
                out.append(CompleteCallFromCache(ctx.call_id, task.task_id, False, ""))
                self.set_terminal(ctx, True, cached, "", "", False, 0, True, out)
                continue
            leader = task.flights.get(key)
            if leader is not None and leader is not ctx:  # ctx itself leads while retrying
                join(leader, ctx)
                continue
            if views:
                if sample_start is not None:
                    start = sample_start(len(views))
                i = select_fn(views, now, sample, max_runnable, max_inflight, mem, stall, start)
            else:
                i = -1
            if i < 0:
                ready.push_front(ctx)
                sched.unserved()
                break
            rec = recs[i]
            ctx.state = RUNNING
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
            while True:
                if ready:
                    nxt = ready.peek()
                elif task.queued:
                    nxt = take_call(task, by_id)
                    ready.push(nxt)
                else:
                    break
                if nxt.key != key:
                    break
                ready.pop()
                if nxt.state == READY:
                    join(ctx, nxt)
            served(task)
        return out

    # --- binding -----------------------------------------------------------------------

    def executor_bound(self, call_id: str, now: int, executor_id: str = "") -> list:
        """The adapter reserved a context for call_id: send it (DispatchCallCmd).
        With ``executor_id`` given, a bind the core no longer wants (the call was
        cancelled meanwhile) is answered with UnbindCall so the reservation is
        not leaked."""
        ctx = self.by_id.get(call_id)
        if (ctx is None or ctx.state != RUNNING or ctx.bound
                or (executor_id and ctx.executor_id != executor_id)):
            if executor_id and (ctx is None or ctx.state == READY or ctx.state == DONE
                                or ctx.executor_id != executor_id):
                return [UnbindCall(call_id, executor_id)]
            return []
        ctx.bound = True
        parent = ctx.parent
        out: list = [DispatchCallCmd(call_id, ctx.executor_id, ctx.task.task_id, ctx.function_id,
                                     ctx.digest, ctx.entry_selector, ctx.args_json, ctx.budget_ms,
                                     ctx.attempt_count, parent.call_id if parent is not None else "")]
        if ctx.children:
            self.subcalls.bind_children(ctx, out)
        return out

    def bind_failed(self, call_id: str, now: int) -> list:
        """The adapter could not reserve the context. A root is re-queued at once
        (ArmCallRetry(now, is_retry=False)) without consuming an attempt; a
        subcall is parked."""
        ctx = self.by_id.get(call_id)
        if ctx is None or ctx.state != RUNNING or ctx.bound:
            return []
        out: list = []
        self._bind_failed(ctx, now, out)
        return out

    def _bind_failed(self, ctx: Any, now: int, out: list) -> None:
        rec = ctx.exec
        self.tasks.release(ctx)
        rec.view.healthy = False  # until the next snapshot says otherwise
        ctx.attempt_count -= 1
        ctx.state = READY
        if ctx.parent is not None:
            self.subcalls.park(ctx)
        else:
            ctx.retry_armed = True
            self.retry.requeue(ctx, now, out)

    # --- waits ----------------------------------------------------------------------------

    def call_waiting(self, call_id: str, attempt_seq: int, now: int) -> list:
        """A CallWaiting (io / subcall) of the current, bound attempt: RUNNING -> WAITING."""
        ctx = self.by_id.get(call_id)
        if (ctx is not None and ctx.state == RUNNING and ctx.bound
                and ctx.attempt_count == attempt_seq):
            ctx.state = WAITING
        return []

    def call_resumed(self, call_id: str, now: int) -> list:
        """Its ResumeCall was written: WAITING -> RUNNING."""
        ctx = self.by_id.get(call_id)
        if ctx is not None and ctx.state == WAITING:
            ctx.state = RUNNING
        return []

    # --- subcalls ---------------------------------------------------------------------------

    def add_subcall(self, parent_call_id: str, requesting_executor_id: str, request_id: str,
                    function_id: str, digest: str, args_json: bytes, granted_budget_ms: int,
                    now: int = 0, entry_selector: str = "main") -> tuple:
        """Register a subcall of ``parent_call_id``: ``(child_call_id, commands)``,
        or ``(SubcallRejected, [])`` when the SubcallBinder refuses it. A result
        in the task's cache answers it at once (CompleteCallFromCache, then
        SubcallDone); otherwise it binds beside its parent or is parked.
        ``args_json`` must be canonical (cachekey.canonical_args_json)."""
        child = self.subcalls.new_child(parent_call_id, requesting_executor_id, request_id,
                                        function_id, digest, args_json, granted_budget_ms,
                                        entry_selector)
        if type(child) is SubcallRejected:
            return child, []
        out: list = []
        task = child.task
        cached = task.cache.get(child.key)
        if cached is not None:
            task.cache_hits += 1
            out.append(CompleteCallFromCache(child.call_id, task.task_id, True, parent_call_id))
            self.set_terminal(child, True, cached, "", "", False, 0, True, out)
            return child.call_id, out
        self.subcalls.attach(child, out)
        return child.call_id, out

    def cancel_subtree(self, parent: Any, reason: str, out: list) -> None:
        """Cancel every active descendant of parent, without resuming it."""
        children = parent.children
        if not children:
            return
        parent.children = None
        for child in list(children.values()):
            st = child.state
            if st == DONE:
                continue
            if st == RUNNING or st == WAITING:
                out.append(CancelCallCmd(child.call_id, child.executor_id, reason,
                                         child.attempt_count))
                self.tasks.release(child)
            self.set_terminal(child, False, None, ERR_CANCELLED, reason, False, 0, False, out,
                              False)

    # --- completion and failure --------------------------------------------------------------

    def call_completed(self, call_id: str, attempt_seq: int, output_json: bytes,
                       budget_used_ms: int, now: int) -> list:
        """A CallCompleted frame. Accepted (the current, bound attempt): the
        commands start with UnbindCall(call_id). Stale or duplicated: []."""
        ctx = self.by_id.get(call_id)
        if ctx is None:
            return []
        st = ctx.state
        if (st != RUNNING and st != WAITING) or not ctx.bound or ctx.attempt_count != attempt_seq:
            return []
        if type(output_json) is not bytes:
            output_json = bytes(output_json)
        rec = ctx.exec
        out: list = [UnbindCall(call_id, ctx.executor_id)]
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
                if (task.ready or task.queued) and not task.in_ring:
                    self.sched.wake(task)
                if task.stop_dispatching:
                    tasks.mark_dirty(task)
        else:
            tasks.release(ctx)
        self.set_terminal(ctx, True, output_json, "", "", False, budget_used_ms, True, out)
        return out

    def call_failed(self, call_id: str, attempt_seq: int, error_kind: str, retryable: bool,
                    message: str, now: int, budget_used_ms: int = 0) -> list:
        """A CallFailed frame (or a failure the adapter synthesized). Accepted:
        the commands start with UnbindCall(call_id). Stale or duplicated: []."""
        ctx = self.by_id.get(call_id)
        if ctx is None:
            return []
        st = ctx.state
        # Stale: DONE; READY (backing off, or rolled back); another attempt; not yet bound.
        if (st != RUNNING and st != WAITING) or not ctx.bound or ctx.attempt_count != attempt_seq:
            return []
        out: list = [UnbindCall(call_id, ctx.executor_id)]
        self.ex.note_completion(ctx.exec)
        self.tasks.release(ctx)
        if ctx.children:
            self.cancel_subtree(ctx, "parent call attempt failed", out)
        self._attempt_failed(ctx, error_kind, bool(retryable), message, budget_used_ms, now, out)
        return out

    def _attempt_failed(self, ctx: Any, kind: str, retryable: bool, message: str,
                        budget_used_ms: int, now: int, out: list) -> None:
        if self.retry.may_retry(ctx, retryable):
            ctx.state = READY
            ctx.bound = False
            ctx.retry_armed = True
            self.retry.arm(ctx, now, out)
        else:
            self.set_terminal(ctx, False, None, kind, message, retryable, budget_used_ms, True, out)

    def retry_ready(self, call_id: str, now: int) -> list:
        """A retry timer (ArmCallRetry) fired: the call goes back to the front of
        its task's queue, unless it no longer waits for that timer."""
        ctx = self.by_id.get(call_id)
        if ctx is None or ctx.state != READY or not ctx.retry_armed:
            return []
        ctx.retry_armed = False
        task = ctx.task
        task.ready.push_front(ctx)
        self.sched.wake(task)
        if task.stop_dispatching:
            self.tasks.mark_dirty(task)
        return []

    # --- executors -----------------------------------------------------------------------

    def executor_snapshot(self, snapshots: Iterable, now: int) -> list:
        """Refresh executor views; retry parked subcalls."""
        self.ex.update(snapshots)
        out: list = []
        self.subcalls.retry_parked(out)
        return out

    def executor_lost(self, executor_id: str, now: int, detail: str = "") -> list:
        """Transport lost: every call bound there fails retryably (EXECUTOR_LOST);
        an unconfirmed bind is rolled back instead. Parents go first so their
        subtrees are cancelled rather than failed one by one. ``detail`` (e.g. the
        sandbox limit that killed it) is appended to the calls' message."""
        rec = self.ex.records.get(executor_id)
        if rec is None:
            return []
        rec.view.healthy = False
        out: list = []
        message = f"executor {executor_id} lost" + (f": {detail}" if detail else "")
        for ctx in sorted(rec.calls.values(), key=_by_depth):
            if ctx.exec is not rec:
                continue  # released by an ancestor's subtree cancellation
            if not ctx.bound:
                self._bind_failed(ctx, now, out)
                continue
            out.append(UnbindCall(ctx.call_id, executor_id))
            self.tasks.release(ctx)
            if ctx.children:
                self.cancel_subtree(ctx, message, out)
            self._attempt_failed(ctx, ERR_EXECUTOR_LOST, True, message, 0, now, out)
        return out

    # --- the epilogue ---------------------------------------------------------------------

    def flush(self, now: int = 0) -> list:
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

    def _drain(self, task: Any, out: list) -> None:
        """Nothing is in flight in a stopped task: cancel what is left."""
        task.ready.clear()
        reason = f"task stopped dispatching: {task.stop_reason}"
        for ctx in list(task.pending.values()):
            if ctx.state != DONE:
                self.set_terminal(ctx, False, None, ERR_CANCELLED, reason, False, 0, False, out)
        by_id = self.by_id
        while task.queued:
            self.set_terminal(take_call(task, by_id), False, None, ERR_CANCELLED, reason, False, 0,
                              False, out)

    def epilogue(self, now: int) -> list:
        """dispatch(now) then flush(now): run after every event batch."""
        out = self.dispatch(now)
        out.extend(self.flush(now))
        return out

    # --- teardown ------------------------------------------------------------------------

    def cancel_task(self, task_id: str, reason: str, now: int) -> list:
        """The task ended (terminal elsewhere: timeout, watch loss, shutdown).
        Every call still in flight is cancelled (CancelCallCmd), including whole
        subcall subtrees, and the task's state is dropped. No ConvergeTaskCalls
        follows. Unknown tasks are ignored."""
        tasks = self.tasks
        out: list = []
        task = tasks.remove(task_id, reason, out)
        if task is None:
            return out
        for ctx in list(task.pending.values()):
            st = ctx.state
            if st == RUNNING or st == WAITING:
                out.append(CancelCallCmd(ctx.call_id, ctx.executor_id, reason, ctx.attempt_count))
                tasks.release(ctx)
            if ctx.children:
                self.cancel_subtree(ctx, reason, out)
            ctx.state = DONE
            ctx.retry_armed = False
        task.pending.clear()
        unpark = self.subcalls.unpark
        for b in task.batches.values():
            for c in b.calls:
                if c.parked:
                    unpark(c)
        tasks.forget(task)
        return out

    def remove_task(self, task_id: str) -> list:
        """Forget a task (normally after it converged, when nothing is in flight;
        anything still in flight is cancelled as by cancel_task)."""
        return self.cancel_task(task_id, "task removed", 0)

    # --- terminal accounting ---------------------------------------------------------------

    def set_terminal(self, ctx: Any, ok: bool, output: Any, kind: str, message: str,
                     retryable: Any, budget_used_ms: Any, counted: bool, out: list,
                     notify: bool = True) -> None:
        """The single accounting point for DONE; idempotent. ``counted``: a real
        failure (calls_failed, FAST_FAIL) rather than a drain or cancellation.
        ``notify``: a subcall resumes its parent (SubcallDone)."""
        if ctx.state == DONE:
            return
        if self.on_terminal is not None:
            self.on_terminal(ctx)
        ctx.state = DONE
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
            self.cancel_subtree(ctx, "parent call ended", out)
        task = ctx.task
        parent = ctx.parent
        if parent is not None:
            siblings = parent.children
            if siblings:
                siblings.pop(ctx.call_id, None)
            if ok:
                task.cache[ctx.key] = output
            if notify and (parent.state == RUNNING or parent.state == WAITING):
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
            return
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
                self.set_terminal(w, ok, output, kind, message, retryable, 0, counted, out)
        batch = task.batches[ctx.batch_idx]
        batch.remaining -= 1
        if batch.remaining == 0:
            task.settle_ready.append(batch)
        if not task.dirty:
            self.tasks.mark_dirty(task)


def link_calls(task: Any, calls: list, by_id: dict) -> None:
    """TaskCallTable.register's per-call part: the committed calls join their task's
    pending roots and ready queue, and the call table."""
    pending = task.pending
    push = task.ready.push
    for ctx in calls:
        ctx.task = task
        pending[ctx.call_id] = ctx
        push(ctx)
        by_id[ctx.call_id] = ctx


def unlink_calls(calls: list, by_id: dict) -> None:
    """CallTable.forget's loop: settled (or cancelled) calls leave the call table."""
    pop = by_id.pop
    for ctx in calls:
        pop(ctx.call_id, None)


def join(leader: Any, waiter: Any) -> None:
    """Singleflight: waiter takes leader's result (roots of one task only)."""
    waiter.leader = leader
    if leader.waiters is None:
        leader.waiters = [waiter]
    else:
        leader.waiters.append(waiter)
    waiter.task.cache_hits += 1
