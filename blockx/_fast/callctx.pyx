# cython: always_allow_keywords=False
# A call's per-call state in the dispatcher and the loop that builds a batch of
# them (compiled; twin: callctx_py.py, which documents the rules).
#
# One CallContext is made per call, so its construction is on the hot path: as
# a cdef class it is allocated and defaulted in C, and its small integers and
# flags live inline (no int object per index). Values that come from executor
# frames (budgets, retryable) stay Python objects so that the compiled and twin
# versions accept exactly the same values. The object fields take part in the
# cyclic GC (a context points at its task, which lists the context).

cimport cython

READY = 0
RUNNING = 1
WAITING = 2
DONE = 3
STATE_NAMES = ("READY", "RUNNING", "WAITING", "DONE")

__all__ = ["CallContext", "make_calls", "READY", "RUNNING", "WAITING", "DONE", "STATE_NAMES"]


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
