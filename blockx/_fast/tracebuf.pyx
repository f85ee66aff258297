# cython: always_allow_keywords=False
# Task trace buffers, the per-call part (compiled; twin: tracebuf_py.py, which
# documents the layout and the memory rule: no Python object per event, rows of
# 8 int64 in one malloc'd buffer, call ids as int keys, a string table for the
# few distinct executor / function / failure names).

cimport cython
from cpython.dict cimport PyDict_GetItem
from cpython.object cimport PyObject
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.string cimport memmove

cdef extern from "Python.h":
    Py_ssize_t PyUnicode_FindChar(object s, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end,
                                  int direction) except -2
    Py_ssize_t PyUnicode_Tailmatch(object s, object sub, Py_ssize_t start, Py_ssize_t end,
                                   int direction) except -1

TASK_START, TASK_END, PHASE, QUEUED, SENT, DONE, IO_WAIT, IO_DONE, SUBCALL, RETRY, LOST = range(11)
CALL_KINDS = frozenset((SENT, DONE, IO_WAIT, IO_DONE, SUBCALL, RETRY))
PINNED_KINDS = frozenset((TASK_START, TASK_END, PHASE))
PINNED_RESERVE = 8
ROW = 8
ENC_INT, ENC_STR, ENC_EMPTY = 0, 1, 2
NONE = -1
STREAM_FLAG = 1 << 61

cdef enum:
    _ROW = 8
    _SENT = 4
    _DONE = 5
    _IO_WAIT = 6
    _IO_DONE = 7
    _SUBCALL = 8
    _RETRY = 9
    _PIN_HI = 2       # TASK_START, TASK_END, PHASE are pinned
    _ENC_INT = 0      # how a task-level event's field sits in its row (twin: ENC_*)
    _ENC_STR = 1
    _ENC_EMPTY = 2
    _MAX_DIGITS = 15

SUB_FLAG = 1 << 62
cdef long long _STREAM_FLAG = 1LL << 61
cdef long long _SUB_FLAG = 1LL << 62
cdef long long _MAX_B = 1LL << 29
cdef long long _MAX_R = 1LL << 32
cdef long long _LIM = 1LL << 62


cdef long long _task_encoding(tuple ev) except -1:
    # The row flag of a task-level event its row can hold (twin: _task_encoding).
    cdef Py_ssize_t n = len(ev) - 2, i
    cdef long long flag
    if n < 0 or n > 5:
        return 0
    flag = 1 | (n << 1)
    for i in range(n):
        v = ev[2 + i]
        if type(v) is str:
            flag |= (<long long>_ENC_STR) << (4 + 2 * i)
        elif type(v) is int:
            if not (-_LIM < v < _LIM):
                return 0
        elif type(v) is tuple and len(<tuple>v) == 0:
            flag |= (<long long>_ENC_EMPTY) << (4 + 2 * i)
        else:
            return 0
    return flag


cdef tuple _task_decoded(long long* row, strings):
    cdef long long flag = row[7], code, v
    cdef Py_ssize_t i
    cdef list out = [row[0], row[1]]
    for i in range((flag >> 1) & 7):
        code = (flag >> (4 + 2 * i)) & 3
        v = row[2 + i]
        out.append(strings[v] if code == _ENC_STR else () if code == _ENC_EMPTY else v)
    return tuple(out)


cdef inline bint _is_call_kind(long long k):
    return _SENT <= k <= _RETRY


cdef long long _parse_root(str s, Py_ssize_t start, bint stop_at_slash, Py_ssize_t* end):
    """The twin's parse_root: the key, or -1; *end where it stopped."""
    cdef Py_ssize_t n = len(s), i = start
    cdef long long a = 0, b = -1
    cdef int digits = 0
    cdef Py_UCS4 ch
    end[0] = i
    if i >= n:
        return -1
    while i < n:
        ch = s[i]
        if ch == u'/':
            if stop_at_slash:
                break
            end[0] = i
            return -1
        if ch == u'.':
            if b >= 0 or digits == 0:
                end[0] = i
                return -1
            b = a
            a = 0
            digits = 0
            i += 1
            continue
        if ch < u'0' or ch > u'9' or (digits >= 1 and a == 0):
            end[0] = i
            return -1
        a = a * 10 + (<long long>ch - 48)
        digits += 1
        if digits > _MAX_DIGITS:
            end[0] = i
            return -1
        i += 1
    end[0] = i
    if digits == 0:
        return -1
    if b >= 0:
        if b >= _MAX_B or a >= _MAX_R:
            return -1
        return _STREAM_FLAG | (b << 32) | a
    return a


cdef long long _sub_key(str s, long long root, Py_ssize_t end):
    """The twin's sub_key: SUB_FLAG | root << 32 | n when s[end:] is exactly
    "/sub-<n>" (canonical decimal, n < 2**32) after a plain root < _MAX_B; else -1."""
    cdef Py_ssize_t n = len(s), i = end + 5, digits = n - end - 5
    cdef long long v = 0
    cdef Py_UCS4 ch
    if root < 0 or root >= _MAX_B or digits < 1 or digits > 10:
        return -1
    if not (s[end] == u'/' and s[end + 1] == u's' and s[end + 2] == u'u' and s[end + 3] == u'b'
            and s[end + 4] == u'-'):
        return -1
    if digits > 1 and s[i] == u'0':
        return -1
    while i < n:
        ch = s[i]
        if ch < u'0' or ch > u'9':
            return -1
        v = v * 10 + (<long long>ch - 48)
        i += 1
    if v >= _MAX_R:
        return -1
    return _SUB_FLAG | (root << 32) | v


def sub_key(str s, long long root, Py_ssize_t end):
    return _sub_key(s, root, end)


cdef inline long long _root_bits(long long key):
    # What sampling looks at in a key >= 0: the root's own key (a subcall's root index).
    return (key >> 32) & (_MAX_B - 1) if key & _SUB_FLAG else key


def parse_root(str s, Py_ssize_t start, bint stop_at_slash):
    cdef Py_ssize_t end = 0
    cdef long long key = _parse_root(s, start, stop_at_slash, &end)
    return key, end


cdef inline long long _int_or_zero(object v):
    if type(v) is int:
        try:
            if -_LIM < v < _LIM:
                return v
        except OverflowError:
            return 0
    return 0


@cython.final
@cython.no_gc
cdef class TraceBuffer:

    def __cinit__(self):
        self._rows = NULL
        self._n = 0
        self._cap = 0

    def __init__(self, str task_id, Py_ssize_t max_events):
        self.task_id = task_id
        self.limit = max_events - PINNED_RESERVE
        self.sample_every = 1
        self.dropped = 0
        self.truncated = 0
        self.ended = False
        self.retained_weight = 0
        self._root_from = len(task_id) + 1
        self._prefix = task_id + "/"
        self._strings = []
        self._string_ix = {}
        self._extras = []

    def __dealloc__(self):
        if self._rows is not NULL:
            PyMem_Free(self._rows)
            self._rows = NULL

    def __len__(self):
        return self._n

    @property
    def sampled(self):
        return self.sample_every > 1

    # ---- keys --------------------------------------------------------------------

    cdef int _unseal(self) except -1:
        # A late event after trim() (a cancelled call's answer): recording resumes.
        if self._string_ix is None:
            self._strings = list(self._strings)
            self._string_ix = {v: i for i, v in enumerate(self._strings)}
            self._extras = list(self._extras)
        return 0

    cdef long long str_c(self, object s) except -1:
        # Names come from executor frames too: whatever they hold, recording never raises.
        if type(s) is not str:
            s = str(s)
        if self._string_ix is None:
            self._unseal()
        cdef PyObject* found = PyDict_GetItem(<dict>self._string_ix, s)
        if found is not NULL:
            return <long long><object>found
        cdef long long i = len(self._strings)
        (<dict>self._string_ix)[s] = i
        (<list>self._strings).append(s)
        return i

    cdef long long key_c(self, str call_id) except? -3:
        cdef Py_ssize_t end = 0, n = len(call_id)
        cdef long long key
        if n == 0:
            return NONE
        if PyUnicode_Tailmatch(call_id, self._prefix, 0, n, -1):
            key = _parse_root(call_id, self._root_from, True, &end)
            if key >= 0:
                if end == n:
                    return key
                if not key & _STREAM_FLAG:
                    key = _sub_key(call_id, key, end)
                    if key >= 0:
                        return key
        return -self.str_c(call_id) - 2

    cdef str call_str(self, long long key):
        if key == NONE:
            return ""
        if key < 0:
            return self._strings[-key - 2]
        if key & _SUB_FLAG:
            return f"{self.task_id}/{(key >> 32) & (_MAX_B - 1)}/sub-{key & (_MAX_R - 1)}"
        if key & _STREAM_FLAG:
            return f"{self.task_id}/{(key >> 32) & (_MAX_B - 1)}.{key & (_MAX_R - 1)}"
        return f"{self.task_id}/{key}"

    def root_of(self, str call_id):
        cdef Py_ssize_t i = PyUnicode_FindChar(call_id, u'/', self._root_from, len(call_id), 1)
        return call_id if i < 0 else call_id[:i]

    cdef bint keeps_c(self, str call_id) except -1:
        cdef Py_ssize_t end = 0
        cdef long long key = -1
        if self.sample_every == 1:
            return True
        if PyUnicode_Tailmatch(call_id, self._prefix, 0, len(call_id), -1):
            key = _parse_root(call_id, self._root_from, True, &end)
        if key >= 0:
            return (key & (self.sample_every - 1)) == 0
        cdef Py_hash_t h = hash(self.root_of(call_id))
        return (h & (self.sample_every - 1)) == 0

    def keeps(self, str call_id):
        return self.keeps_c(call_id)

    cdef bint keeps_row_c(self, Py_ssize_t r) except -1:
        cdef long long key = self._rows[r * _ROW + 2]
        if key >= 0:
            return (_root_bits(key) & (self.sample_every - 1)) == 0
        return self.keeps_c(self.call_str(key))

    # ---- recording -------------------------------------------------------------------

    cdef int append_c(self, long long kind, long long t, long long a, long long b, long long c, long long d,
                      long long e) except -1:
        cdef Py_ssize_t new_cap
        cdef long long* rows
        if self._n == self._cap:
            new_cap = self._cap * 2 if self._cap else 16
            rows = <long long*>PyMem_Realloc(self._rows, new_cap * _ROW * sizeof(long long))
            if rows is NULL:
                raise MemoryError()
            self._rows = rows
            self._cap = new_cap
        rows = self._rows + self._n * _ROW
        rows[0] = kind
        rows[1] = t
        rows[2] = a
        rows[3] = b
        rows[4] = c
        rows[5] = d
        rows[6] = e
        rows[7] = 0
        self._n += 1
        if self._n >= self.limit and _is_call_kind(kind):
            self.compact_c()
        return 0

    def add_call_event(self, tuple ev):
        cdef long long kind = ev[0], t = ev[1]
        cdef str call_id = ev[2]
        if self.sample_every != 1 and not self.keeps_c(call_id):
            self.dropped += 1
            return
        cdef long long key = self.key_c(call_id)
        if kind == _SENT:
            self.append_c(kind, t, key, self.str_c(ev[3]), _int_or_zero(ev[4]), self.key_c(ev[5]), self.str_c(ev[6]))
        elif kind == _DONE:
            self.append_c(kind, t, key, self.str_c(ev[3]), _int_or_zero(ev[4]), self.str_c(ev[5]),
                          _int_or_zero(ev[6]))
        elif kind == _IO_WAIT:
            self.append_c(kind, t, key, 0, _int_or_zero(ev[3]), self.str_c(ev[4]), 0)
        elif kind == _IO_DONE:
            self.append_c(kind, t, key, 0, 1 if ev[3] else 0, 0, 0)
        elif kind == _SUBCALL:
            self.append_c(kind, t, key, self.key_c(ev[3]), 0, 0, 0)
        elif kind == _RETRY:
            self.append_c(kind, t, key, 0, _int_or_zero(ev[3]), 1 if ev[4] else 0, 0)
        else:
            raise ValueError(f"not a call event kind: {kind}")

    def add_task_event(self, tuple ev):
        cdef long long kind = ev[0]
        if kind > _PIN_HI and self._n >= self.limit:
            self.compact_c()
            if self._n >= self.limit:
                self.dropped += 1
                self.truncated += 1
                return
        cdef long long flag = _task_encoding(ev)
        cdef long long f[5]
        cdef Py_ssize_t i
        cdef long long code
        if flag:
            for i in range(5):
                f[i] = 0
            for i in range(len(ev) - 2):
                code = (flag >> (4 + 2 * i)) & 3
                if code == _ENC_STR:
                    f[i] = self.str_c(ev[2 + i])
                elif code == _ENC_INT:
                    f[i] = ev[2 + i]
            self.append_c(kind, ev[1], f[0], f[1], f[2], f[3], f[4])
            self._rows[(self._n - 1) * _ROW + 7] = flag
            return
        if self._string_ix is None:
            self._unseal()
        (<list>self._extras).append(ev)
        self.append_c(kind, ev[1], len(self._extras) - 1, 0, 0, 0, 0)

    cdef int compact_c(self) except -1:
        cdef Py_ssize_t target = self.limit // 2, before, r, w
        cdef bint any_call
        cdef long long* rows
        while self._n > target:
            before = self._n
            self.sample_every *= 2
            rows = self._rows
            w = 0
            any_call = False
            for r in range(self._n):
                if _is_call_kind(rows[r * _ROW]):
                    if not self.keeps_row_c(r):
                        continue
                    any_call = True
                if w != r:
                    memmove(rows + w * _ROW, rows + r * _ROW, _ROW * sizeof(long long))
                w += 1
            self._n = w
            self.dropped += before - w
            if not any_call:
                break
        return 0

    def compact(self):
        self.compact_c()

    def presample(self, long long expected_events):
        """A call phase of a known size is committed: if its events will pass the
        cap anyway, sample from the start (k: the least power of two that fits them)
        rather than record, compact and drop."""
        cdef long long k = self.sample_every
        while expected_events // k > self.limit - self._n:
            k *= 2
        self.sample_every = k

    def trim(self):
        """The task ended: give back the buffer's unused room (a retained trace
        of a one-call task is a few hundred bytes of rows), and seal it: its
        names and task events become tuples and the name index is dropped, so a
        retained trace holds no container the cyclic GC must scan (the trace is
        no_gc: it references only strings, ints and tuples of them). A late
        event unseals it."""
        cdef long long* rows
        if self._rows is not NULL and self._cap > self._n:
            rows = <long long*>PyMem_Realloc(self._rows, max(self._n, 1) * _ROW * sizeof(long long))
            if rows is not NULL:
                self._rows = rows
                self._cap = max(self._n, 1)
        if self._string_ix is not None:
            self._strings = tuple(self._strings)
            self._string_ix = None
            self._extras = tuple(self._extras)

    # ---- reading ---------------------------------------------------------------------

    @property
    def events(self):
        cdef list out = []
        s = self._strings
        cdef long long* row
        cdef long long kind, t, a, b, c, d, e
        cdef Py_ssize_t r
        for r in range(self._n):
            row = self._rows + r * _ROW
            kind = row[0]; t = row[1]; a = row[2]; b = row[3]; c = row[4]; d = row[5]; e = row[6]
            if kind == _SENT:
                out.append((kind, t, self.call_str(a), s[b], c, self.call_str(d), s[e]))
            elif kind == _DONE:
                out.append((kind, t, self.call_str(a), s[b], c, s[d], e))
            elif kind == _IO_WAIT:
                out.append((kind, t, self.call_str(a), c, s[d]))
            elif kind == _IO_DONE:
                out.append((kind, t, self.call_str(a), c != 0))
            elif kind == _SUBCALL:
                out.append((kind, t, self.call_str(a), self.call_str(b)))
            elif kind == _RETRY:
                out.append((kind, t, self.call_str(a), c, d != 0))
            elif row[7]:
                out.append(_task_decoded(row, s))
            else:
                out.append(self._extras[a])
        return out


@cython.final
cdef class CallRecorder:

    def __init__(self, dict tasks):
        self.tasks = tasks
        self.now_us = 0

    cdef TraceBuffer _recording(self, object task_id, str call_id):
        # The trace that records an event of call_id now; None for an unknown
        # task or a call out of the sample (counted as dropped).
        cdef PyObject* found = PyDict_GetItem(self.tasks, task_id)
        if found is NULL:
            return None
        cdef TraceBuffer tr = <TraceBuffer>found
        if tr.sample_every != 1 and not tr.keeps_c(call_id):
            tr.dropped += 1
            return None
        return tr

    def call_sent(self, cmd):
        cdef str call_id = cmd.call_id
        cdef TraceBuffer tr = self._recording(cmd.task_id, call_id)
        if tr is None:
            return
        tr.append_c(_SENT, self.now_us, tr.key_c(call_id), tr.str_c(cmd.executor_id),
                    _int_or_zero(cmd.attempt_seq), tr.key_c(cmd.parent_call_id), tr.str_c(cmd.function_id))

    def call_done(self, p, call_id, executor_id, error_kind):
        task_id = p.get("taskId")
        if type(task_id) is not str or type(call_id) is not str:
            return
        cdef TraceBuffer tr = self._recording(task_id, call_id)
        if tr is None:
            return
        tr.append_c(_DONE, self.now_us, tr.key_c(call_id), tr.str_c(executor_id), _int_or_zero(p.get("attemptSeq")),
                    tr.str_c(error_kind), _int_or_zero(p.get("budgetUsedMs", 0)))

    def subcall(self, task_id, parent_call_id, child_call_id):
        if type(task_id) is not str or type(parent_call_id) is not str or type(child_call_id) is not str:
            return
        cdef TraceBuffer tr = self._recording(task_id, parent_call_id)
        if tr is None:
            return
        tr.append_c(_SUBCALL, self.now_us, tr.key_c(parent_call_id), tr.key_c(child_call_id), 0, 0, 0)
