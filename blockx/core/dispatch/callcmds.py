"""The three commands the DispatcherCore emits for every call (BindCall,
DispatchCallCmd, UnbindCall): one source in Cython's pure-Python mode,
compiled with callcmds.pxd, interpreted under BLOCKX_NO_EXTENSIONS=1.

Rules: what each command asks of the adapter is documented in
blockx/core/dispatch/commands.py, which re-exports these. They are plain
records: positional or keyword construction, equality by type and fields,
unhashable, a dataclass-style repr. Made once or twice per call, so compiled
they are cdef classes the dispatch loop builds in C (new_* below, no argument
tuple). They carry only strings, bytes, ints and bools (the rule of commands),
so they can never be part of a reference cycle and stay out of the cyclic GC
(no_gc, in the .pxd): millions of them per minute then cost the collector
nothing."""
import cython

__all__ = ["BindCall", "UnbindCall", "DispatchCallCmd"]


@cython.final
@cython.no_gc
@cython.freelist(64)
@cython.cclass
class BindCall:
    if not cython.compiled:
        __slots__ = ("call_id", "executor_id", "task_id", "is_subcall", "parent_call_id")

    def __init__(self, call_id, executor_id, task_id, is_subcall, parent_call_id):
        self.call_id = call_id
        self.executor_id = executor_id
        self.task_id = task_id
        self.is_subcall = is_subcall
        self.parent_call_id = parent_call_id

    def _fields(self):
        return (self.call_id, self.executor_id, self.task_id, self.is_subcall, self.parent_call_id)

    def __eq__(self, other):
        if type(other) is not BindCall:
            return NotImplemented
        return self._fields() == cython.cast(BindCall, other)._fields()

    def __ne__(self, other):
        if type(other) is not BindCall:
            return NotImplemented
        return self._fields() != cython.cast(BindCall, other)._fields()

    __hash__ = None

    def __repr__(self):
        return (f"BindCall(call_id={self.call_id!r}, executor_id={self.executor_id!r}, "
                f"task_id={self.task_id!r}, is_subcall={self.is_subcall!r}, "
                f"parent_call_id={self.parent_call_id!r})")


@cython.final
@cython.no_gc
@cython.freelist(64)
@cython.cclass
class UnbindCall:
    if not cython.compiled:
        __slots__ = ("call_id", "executor_id")

    def __init__(self, call_id, executor_id):
        self.call_id = call_id
        self.executor_id = executor_id

    def _fields(self):
        return (self.call_id, self.executor_id)

    def __eq__(self, other):
        if type(other) is not UnbindCall:
            return NotImplemented
        return self._fields() == cython.cast(UnbindCall, other)._fields()

    def __ne__(self, other):
        if type(other) is not UnbindCall:
            return NotImplemented
        return self._fields() != cython.cast(UnbindCall, other)._fields()

    __hash__ = None

    def __repr__(self):
        return f"UnbindCall(call_id={self.call_id!r}, executor_id={self.executor_id!r})"


@cython.final
@cython.no_gc
@cython.freelist(64)
@cython.cclass
class DispatchCallCmd:
    if not cython.compiled:
        __slots__ = ("call_id", "executor_id", "task_id", "function_id", "digest",
                     "entry_selector", "args_json", "budget_ms", "attempt_seq", "parent_call_id")

    def __init__(self, call_id, executor_id, task_id, function_id, digest, entry_selector,
                 args_json, budget_ms, attempt_seq, parent_call_id):
        self.call_id = call_id
        self.executor_id = executor_id
        self.task_id = task_id
        self.function_id = function_id
        self.digest = digest
        self.entry_selector = entry_selector
        self.args_json = args_json
        self.budget_ms = budget_ms          # 0 = unlimited
        self.attempt_seq = attempt_seq
        self.parent_call_id = parent_call_id    # "" for root calls

    def _fields(self):
        return (self.call_id, self.executor_id, self.task_id, self.function_id, self.digest,
                self.entry_selector, self.args_json, self.budget_ms, self.attempt_seq,
                self.parent_call_id)

    def __eq__(self, other):
        if type(other) is not DispatchCallCmd:
            return NotImplemented
        return self._fields() == cython.cast(DispatchCallCmd, other)._fields()

    def __ne__(self, other):
        if type(other) is not DispatchCallCmd:
            return NotImplemented
        return self._fields() != cython.cast(DispatchCallCmd, other)._fields()

    __hash__ = None

    def __repr__(self):
        return (f"DispatchCallCmd(call_id={self.call_id!r}, executor_id={self.executor_id!r}, "
                f"task_id={self.task_id!r}, function_id={self.function_id!r}, "
                f"digest={self.digest!r}, entry_selector={self.entry_selector!r}, "
                f"args_json={self.args_json!r}, budget_ms={self.budget_ms!r}, "
                f"attempt_seq={self.attempt_seq!r}, parent_call_id={self.parent_call_id!r})")


# The constructors the compiled dispatch loop calls in C (cpdef in callcmds.pxd):
# the record without __init__'s argument tuple. Interpreted, plain functions.

def new_bind_call(call_id, executor_id, task_id, is_subcall, parent_call_id):
    c: BindCall = BindCall.__new__(BindCall)
    c.call_id = call_id
    c.executor_id = executor_id
    c.task_id = task_id
    c.is_subcall = is_subcall
    c.parent_call_id = parent_call_id
    return c


def new_unbind_call(call_id, executor_id):
    c: UnbindCall = UnbindCall.__new__(UnbindCall)
    c.call_id = call_id
    c.executor_id = executor_id
    return c


def new_dispatch_call(call_id, executor_id, task_id, function_id, digest, entry_selector,
                      args_json, budget_ms, attempt_seq, parent_call_id):
    c: DispatchCallCmd = DispatchCallCmd.__new__(DispatchCallCmd)
    c.call_id = call_id
    c.executor_id = executor_id
    c.task_id = task_id
    c.function_id = function_id
    c.digest = digest
    c.entry_selector = entry_selector
    c.args_json = args_json
    c.budget_ms = budget_ms
    c.attempt_seq = attempt_seq
    c.parent_call_id = parent_call_id
    return c
