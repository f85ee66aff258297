# cython: always_allow_keywords=False
# Task trace buffers, the per-call part (compiled; twin: tracebuf_py.py, which
# documents the behaviour; the recorder and store around them live in
# blockx/adapters/trace_recorder.py).
#
# call_sent / call_done run for every call of every task: a sampled-out call
# costs a dict lookup, one find and one hash, with no tuple built.

cimport cython
from cpython.dict cimport PyDict_GetItem
from cpython.object cimport PyObject

cdef extern from "Python.h":
    Py_ssize_t PyUnicode_FindChar(object s, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end,
                                  int direction) except -2

TASK_START, TASK_END, PHASE, QUEUED, SENT, DONE, IO_WAIT, IO_DONE, SUBCALL, RETRY, LOST = range(11)
CALL_KINDS = frozenset((SENT, DONE, IO_WAIT, IO_DONE, SUBCALL, RETRY))
PINNED_KINDS = frozenset((TASK_START, TASK_END, PHASE))
PINNED_RESERVE = 8

cdef enum:
    _SENT = 4
    _DONE = 5
    _CALL_LO = 4      # SENT .. RETRY are the call kinds
    _CALL_HI = 9
    _PIN_HI = 2       # TASK_START, TASK_END, PHASE are pinned


cdef inline bint _is_call_kind(object ev):
    cdef long k = (<tuple>ev)[0]
    return _CALL_LO <= k <= _CALL_HI


@cython.final
cdef class TaskTrace:

    def __init__(self, str task_id, Py_ssize_t max_events):
        self.task_id = task_id
        self.events = []
        self.limit = max_events - PINNED_RESERVE
        self.sample_every = 1
        self.dropped = 0
        self.truncated = 0
        self.ended = False
        self._root_from = len(task_id) + 1

    @property
    def sampled(self):
        return self.sample_every > 1

    def root_of(self, str call_id):
        cdef Py_ssize_t i = PyUnicode_FindChar(call_id, u'/', self._root_from, len(call_id), 1)
        return call_id if i < 0 else call_id[:i]

    cdef bint keeps_c(self, str call_id) except -1:
        cdef Py_ssize_t i = PyUnicode_FindChar(call_id, u'/', self._root_from, len(call_id), 1)
        cdef Py_hash_t h = hash(call_id if i < 0 else call_id[:i])
        return (h & (self.sample_every - 1)) == 0

    def keeps(self, str call_id):
        return self.keeps_c(call_id)

    def add_call_event(self, tuple ev):
        if self.sample_every != 1 and not self.keeps_c(ev[2]):
            self.dropped += 1
            return
        self.events.append(ev)
        if len(self.events) >= self.limit:
            self.compact_c()

    def add_task_event(self, tuple ev):
        cdef long k = ev[0]
        if k <= _PIN_HI:
            self.events.append(ev)
            return
        if len(self.events) >= self.limit:
            self.compact_c()
            if len(self.events) >= self.limit:
                self.dropped += 1
                self.truncated += 1
                return
        self.events.append(ev)

    cdef int compact_c(self) except -1:
        cdef list events = self.events
        cdef list kept
        cdef Py_ssize_t target = self.limit // 2, before
        cdef bint any_call
        while len(events) > target:
            before = len(events)
            self.sample_every *= 2
            kept = []
            any_call = False
            for ev in events:
                if _is_call_kind(ev):
                    if self.keeps_c((<tuple>ev)[2]):
                        kept.append(ev)
                        any_call = True
                else:
                    kept.append(ev)
            events = kept
            self.dropped += before - len(events)
            if not any_call:
                break
        self.events = events
        return 0

    def compact(self):
        self.compact_c()


@cython.final
cdef class CallRecorder:

    def __init__(self, dict tasks):
        self.tasks = tasks
        self.now_us = 0

    def call_sent(self, cmd):
        cdef PyObject* found = PyDict_GetItem(self.tasks, cmd.task_id)
        if found is NULL:
            return
        cdef TaskTrace tr = <TaskTrace>found
        cdef str call_id = cmd.call_id
        if tr.sample_every != 1 and not tr.keeps_c(call_id):
            tr.dropped += 1
            return
        tr.events.append((_SENT, self.now_us, call_id, cmd.executor_id, cmd.attempt_seq, cmd.parent_call_id,
                          cmd.function_id))
        if len(tr.events) >= tr.limit:
            tr.compact_c()

    def call_done(self, dict p, str call_id, executor_id, error_kind):
        task_id = p.get("taskId")
        if type(task_id) is not str:
            return
        cdef PyObject* found = PyDict_GetItem(self.tasks, task_id)
        if found is NULL:
            return
        cdef TaskTrace tr = <TaskTrace>found
        if tr.sample_every != 1 and not tr.keeps_c(call_id):
            tr.dropped += 1
            return
        tr.events.append((_DONE, self.now_us, call_id, executor_id, p.get("attemptSeq"), error_kind,
                          p.get("budgetUsedMs", 0)))
        if len(tr.events) >= tr.limit:
            tr.compact_c()
