# cython: language_level=3, boundscheck=False, wraparound=False
"""WrittenLog and Notice, compiled (twin: writenotice_py.py, whose docstring
holds the theory of operation). What compiling buys: a Notice is made and
answered without a Python frame, where the waiter it replaces cost four per
ResumeCall (its __init__, done, set_result and the actor's bookkeeping)."""

cimport cython
from cpython.list cimport PyList_GET_SIZE


@cython.final
cdef class WrittenLog:
    cdef public list keys
    cdef object _on_first
    cdef object _on_lost

    def __init__(self, on_first, on_lost):
        self.keys = []
        self._on_first = on_first
        self._on_lost = on_lost

    def take(self):
        """The keys written since the last take(), oldest first; the log starts over."""
        keys = self.keys
        self.keys = []
        return keys

    def __len__(self):
        return PyList_GET_SIZE(self.keys)


@cython.final
cdef class Notice:
    cdef WrittenLog _log
    cdef public object key
    cdef public object executor_id
    cdef public object attempt_seq
    cdef bint _done

    def __init__(self, log, key, executor_id, attempt_seq):
        if type(log) is not WrittenLog:
            raise TypeError(f"Notice needs a WrittenLog, not {type(log).__name__}")
        self._log = <WrittenLog>log
        self.key = key
        self.executor_id = executor_id
        self.attempt_seq = attempt_seq
        self._done = False

    def done(self):
        return self._done

    def set_result(self, _value):
        if self._done:
            raise RuntimeError(f"Notice {self.key!r} was already answered")
        self._done = True
        cdef WrittenLog log = self._log
        log.keys.append(self.key)
        if PyList_GET_SIZE(log.keys) == 1:
            log._on_first()

    def set_exception(self, exc):
        if self._done:
            raise RuntimeError(f"Notice {self.key!r} was already answered")
        self._done = True
        self._log._on_lost(self.executor_id, self.key, self.attempt_seq, exc)
