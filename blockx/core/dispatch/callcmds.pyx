# The per-call commands of the DispatcherCore (compiled; twin: callcmds_py.py,
# dataclasses, which states the rules). Made once or twice per call, so they are
# cdef classes the dispatch loop builds in C (new_* below, no argument tuple);
# equality, repr and unhashability follow the twin's dataclasses. They carry only
# strings, bytes, ints and bools (the rule of blockx/core/dispatch/commands.py), so they can never be
# part of a reference cycle and stay out of the cyclic GC (no_gc): millions of
# them per minute then cost the collector nothing.

cimport cython

__all__ = ["BindCall", "UnbindCall", "DispatchCallCmd"]


@cython.final
@cython.no_gc
@cython.freelist(64)
cdef class BindCall:

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
        return self._fields() == (<BindCall>other)._fields()

    def __ne__(self, other):
        if type(other) is not BindCall:
            return NotImplemented
        return self._fields() != (<BindCall>other)._fields()

    __hash__ = None

    def __repr__(self):
        return (f"BindCall(call_id={self.call_id!r}, executor_id={self.executor_id!r}, "
                f"task_id={self.task_id!r}, is_subcall={self.is_subcall!r}, "
                f"parent_call_id={self.parent_call_id!r})")


@cython.final
@cython.no_gc
@cython.freelist(64)
cdef class UnbindCall:

    def __init__(self, call_id, executor_id):
        self.call_id = call_id
        self.executor_id = executor_id

    def _fields(self):
        return (self.call_id, self.executor_id)

    def __eq__(self, other):
        if type(other) is not UnbindCall:
            return NotImplemented
        return self._fields() == (<UnbindCall>other)._fields()

    def __ne__(self, other):
        if type(other) is not UnbindCall:
            return NotImplemented
        return self._fields() != (<UnbindCall>other)._fields()

    __hash__ = None

    def __repr__(self):
        return f"UnbindCall(call_id={self.call_id!r}, executor_id={self.executor_id!r})"


@cython.final
@cython.no_gc
@cython.freelist(64)
cdef class DispatchCallCmd:

    def __init__(self, call_id, executor_id, task_id, function_id, digest, entry_selector,
                 args_json, budget_ms, attempt_seq, parent_call_id):
        self.call_id = call_id
        self.executor_id = executor_id
        self.task_id = task_id
        self.function_id = function_id
        self.digest = digest
        self.entry_selector = entry_selector
        self.args_json = args_json
        self.budget_ms = budget_ms
        self.attempt_seq = attempt_seq
        self.parent_call_id = parent_call_id

    def _fields(self):
        return (self.call_id, self.executor_id, self.task_id, self.function_id, self.digest,
                self.entry_selector, self.args_json, self.budget_ms, self.attempt_seq,
                self.parent_call_id)

    def __eq__(self, other):
        if type(other) is not DispatchCallCmd:
            return NotImplemented
        return self._fields() == (<DispatchCallCmd>other)._fields()

    def __ne__(self, other):
        if type(other) is not DispatchCallCmd:
            return NotImplemented
        return self._fields() != (<DispatchCallCmd>other)._fields()

    __hash__ = None

    def __repr__(self):
        return (f"DispatchCallCmd(call_id={self.call_id!r}, executor_id={self.executor_id!r}, "
                f"task_id={self.task_id!r}, function_id={self.function_id!r}, "
                f"digest={self.digest!r}, entry_selector={self.entry_selector!r}, "
                f"args_json={self.args_json!r}, budget_ms={self.budget_ms!r}, "
                f"attempt_seq={self.attempt_seq!r}, parent_call_id={self.parent_call_id!r})")


cdef BindCall new_bind_call(object call_id, object executor_id, object task_id, object is_subcall,
                            object parent_call_id):
    cdef BindCall c = BindCall.__new__(BindCall)
    c.call_id = call_id
    c.executor_id = executor_id
    c.task_id = task_id
    c.is_subcall = is_subcall
    c.parent_call_id = parent_call_id
    return c


cdef UnbindCall new_unbind_call(object call_id, object executor_id):
    cdef UnbindCall c = UnbindCall.__new__(UnbindCall)
    c.call_id = call_id
    c.executor_id = executor_id
    return c


cdef DispatchCallCmd new_dispatch_call(object call_id, object executor_id, object task_id,
                                       object function_id, object digest, object entry_selector,
                                       object args_json, object budget_ms, object attempt_seq,
                                       object parent_call_id):
    cdef DispatchCallCmd c = DispatchCallCmd.__new__(DispatchCallCmd)
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
