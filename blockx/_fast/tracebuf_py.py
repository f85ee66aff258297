"""Task trace buffers, the per-call part (twin of tracebuf.pyx; the recorder and
store around them: blockx/adapters/telemetry/trace_recorder.py).

``TraceBuffer`` is one task's bounded event buffer; ``CallRecorder`` holds the two
hooks that run for every call (ExecuteCall sent, CallCompleted / CallFailed
accepted), which is why this is a hot path.

Memory rule: recording allocates no Python object per event. Events are rows
of 8 int64 in one growable buffer (here an ``array('q')``; compiled: a C
buffer). A call id is an int key: a root call of the task ("<task>/<i>", or
"<task>/<b>.<r>" for a streamed batch) is parsed into its index, a root's direct
subcall ("<task>/<i>/sub-<n>", the SubcallBinder's form) into SUB_FLAG | i << 32 | n,
anything else (a deeper subcall) goes to the trace's string table; executor ids, function ids,
failure kinds and IO backends, few distinct values each, go to the string table
too. Retaining one small object per call (a tuple, a call id string from a
decoded frame) would pin a malloc pool per call among the short-lived objects
around it: a Worker with traces on grew by tens of MB and ran slower for it.
Task-level events (the start, phases, queue commits, the end, a lost
executor) are encoded in their row too when their fields are strings, ints or
the empty tuple (the pad slot says how); any other keeps its Python tuple in
``extras``. So a retained trace keeps no tuple per event: thousands of ended
traces are retained at once, and every tracked object they held counted towards
the cyclic GC's next collection. ``events`` decodes the rows into tuples
(export only):

- SENT ``(k, t, call_id, executor_id, attempt, parent_call_id, function_id)``
- DONE ``(k, t, call_id, executor_id, attempt, error_kind, budget_used_ms)``
- IO_WAIT ``(k, t, call_id, attempt, backend)``; IO_DONE ``(k, t, call_id, ok)``
- SUBCALL ``(k, t, parent_call_id, child_call_id)``; RETRY ``(k, t, call_id, backoff_ms, is_retry)``
- the task-level kinds: the tuple given to ``add_task_event``.

Sampling past the cap keeps a call tree when its root's index is a multiple of
``sample_every`` (every k-th call; a root id that is not an index: by its hash)."""
from __future__ import annotations

from array import array

TASK_START, TASK_END, PHASE, QUEUED, SENT, DONE, IO_WAIT, IO_DONE, SUBCALL, RETRY, LOST = range(11)
# Events that belong to a call (row slot 2 is its call key): these are sampled.
CALL_KINDS = frozenset((SENT, DONE, IO_WAIT, IO_DONE, SUBCALL, RETRY))
# Always kept, whatever the cap: at most a handful per task.
PINNED_KINDS = frozenset((TASK_START, TASK_END, PHASE))
# Room kept under the cap for the pinned events.
PINNED_RESERVE = 8
ROW = 8
# How a task-level event's field sits in its row (see _task_encoding).
ENC_INT, ENC_STR, ENC_EMPTY = 0, 1, 2
_LIM = 1 << 62
NONE = -1                      # no call (a root call's parent)
STREAM_FLAG = 1 << 61          # a streamed root "<b>.<r>": flag | b << 32 | r
SUB_FLAG = 1 << 62             # a root's subcall "<i>/sub-<n>": flag | i << 32 | n (i < _MAX_B, n < _MAX_R)
_MAX_B = 1 << 29
_MAX_R = 1 << 32
_MAX_DIGITS = 15
_SUB = "/sub-"


def sub_key(s: str, root: int, end: int) -> int:
    """The key of ``s`` when, after its root index ``root`` (a plain one) ending at
    ``end``, it is exactly "/sub-<n>" (canonical decimal, n < 2**32); else -1."""
    if root < 0 or root >= _MAX_B or not s.startswith(_SUB, end):
        return -1
    digits = s[end + len(_SUB):]
    if not digits or len(digits) > 10 or (len(digits) > 1 and digits[0] == "0"):
        return -1
    if not all("0" <= ch <= "9" for ch in digits):
        return -1
    n = int(digits)
    if n >= _MAX_R:
        return -1
    return SUB_FLAG | (root << 32) | n


def _root_bits(key: int) -> int:
    """What sampling looks at in a key >= 0: the root's own key (a subcall's root index)."""
    return (key >> 32) & (_MAX_B - 1) if key & SUB_FLAG else key


def parse_root(s: str, start: int, stop_at_slash: bool) -> tuple[int, int]:
    """(key, end): the root index at ``s[start:]`` ("<i>" or "<b>.<r>", canonical
    decimal) and where it ended (len(s), or the "/" it stopped at). key -1: not one."""
    n = len(s)
    i = start
    a = 0
    b = -1
    digits = 0
    if i >= n:
        return -1, i
    while i < n:
        ch = s[i]
        if ch == "/":
            if stop_at_slash:
                break
            return -1, i
        if ch == ".":
            if b >= 0 or digits == 0:
                return -1, i
            b, a, digits = a, 0, 0
            i += 1
            continue
        if ch < "0" or ch > "9":
            return -1, i
        if digits >= 1 and a == 0:        # a leading zero: not how the core writes an index
            return -1, i
        a = a * 10 + (ord(ch) - 48)
        digits += 1
        if digits > _MAX_DIGITS:
            return -1, i
        i += 1
    if digits == 0:
        return -1, i
    if b >= 0:
        if b >= _MAX_B or a >= _MAX_R:
            return -1, i
        return STREAM_FLAG | (b << 32) | a, i
    return a, i


def _int_or_zero(v) -> int:
    return v if type(v) is int and -(1 << 62) < v < (1 << 62) else 0


class TraceBuffer:
    """One task's events, bounded. Owned by the TraceStore; read by trace_export."""

    __slots__ = ("task_id", "limit", "sample_every", "dropped", "truncated", "ended", "retained_weight",
                 "_root_from", "_prefix", "_rows", "_strings", "_string_ix", "_extras")

    def __init__(self, task_id: str, max_events: int) -> None:
        self.task_id = task_id
        self.limit = max_events - PINNED_RESERVE   # room for call and queue events
        self.sample_every = 1                      # k: a power of two; 1 = every call
        self.dropped = 0                           # events not kept (sampling or the cap)
        self.truncated = 0                         # of those, task-level events past the cap
        self.ended = False
        self.retained_weight = 0                   # its weight in the store's retained budget, once ended
        self._root_from = len(task_id) + 1         # root call ids are "<task_id>/<index>"
        self._prefix = task_id + "/"
        self._rows = array("q")
        self._strings: list[str] = []
        self._string_ix: dict[str, int] = {}
        self._extras: list[tuple] = []

    def __len__(self) -> int:
        return len(self._rows) // ROW

    @property
    def sampled(self) -> bool:
        return self.sample_every > 1

    # ---- keys --------------------------------------------------------------------

    def _str(self, s) -> int:
        if type(s) is not str:          # names come from executor frames too: recording never raises
            s = str(s)
        if self._string_ix is None:
            self._unseal()
        i = self._string_ix.get(s)
        if i is None:
            i = self._string_ix[s] = len(self._strings)
            self._strings.append(s)
        return i

    def _key(self, call_id: str) -> int:
        """The int key of a call id: >= 0 a root of this task, -1 none, else -(string index) - 2."""
        if not call_id:
            return NONE
        if call_id.startswith(self._prefix):
            key, end = parse_root(call_id, self._root_from, True)
            if key >= 0:
                if end == len(call_id):
                    return key
                if not key & STREAM_FLAG:
                    key = sub_key(call_id, key, end)
                    if key >= 0:
                        return key
        return -self._str(call_id) - 2

    def _call_str(self, key: int) -> str:
        if key == NONE:
            return ""
        if key < 0:
            return self._strings[-key - 2]
        if key & SUB_FLAG:
            return f"{self.task_id}/{(key >> 32) & (_MAX_B - 1)}/sub-{key & (_MAX_R - 1)}"
        if key & STREAM_FLAG:
            return f"{self.task_id}/{(key >> 32) & (_MAX_B - 1)}.{key & (_MAX_R - 1)}"
        return f"{self.task_id}/{key}"

    def root_of(self, call_id: str) -> str:
        """The root call of ``call_id`` ("<task>/<i>" for "<task>/<i>/sub-1/sub-2")."""
        i = call_id.find("/", self._root_from)
        return call_id if i < 0 else call_id[:i]

    def _keeps_root(self, key: int, call_id: str) -> bool:
        """Sampling by the root's index (every k-th call); a root that is not one: by its hash."""
        if key >= 0:
            return not (key & (self.sample_every - 1))
        return not (hash(self.root_of(call_id)) & (self.sample_every - 1))

    def keeps(self, call_id: str) -> bool:
        """Is ``call_id`` (with its whole call tree) in the sample?"""
        if self.sample_every == 1:
            return True
        key = -1
        if call_id.startswith(self._prefix):
            key, _end = parse_root(call_id, self._root_from, True)
        return self._keeps_root(key, call_id)

    def _keeps_row(self, base: int) -> bool:
        rows = self._rows
        key = rows[base + 2]
        if key >= 0:
            return not (_root_bits(key) & (self.sample_every - 1))
        return self.keeps(self._call_str(key))

    # ---- recording -------------------------------------------------------------------

    def _append(self, kind, t, a, b, c, d, e) -> None:
        self._rows.extend((kind, t, a, b, c, d, e, 0))
        if len(self._rows) >= self.limit * ROW:
            self.compact()

    def add_call_event(self, ev: tuple) -> None:
        """A call's event in its tuple form (index 2 is its call id): kept when the
        call is in the sample."""
        kind, t, call_id = ev[0], ev[1], ev[2]
        if self.sample_every != 1 and not self.keeps(call_id):
            self.dropped += 1
            return
        key = self._key(call_id)
        if kind == SENT:
            self._append(kind, t, key, self._str(ev[3]), _int_or_zero(ev[4]), self._key(ev[5]), self._str(ev[6]))
        elif kind == DONE:
            self._append(kind, t, key, self._str(ev[3]), _int_or_zero(ev[4]), self._str(ev[5]),
                         _int_or_zero(ev[6]))
        elif kind == IO_WAIT:
            self._append(kind, t, key, 0, _int_or_zero(ev[3]), self._str(ev[4]), 0)
        elif kind == IO_DONE:
            self._append(kind, t, key, 0, 1 if ev[3] else 0, 0, 0)
        elif kind == SUBCALL:
            self._append(kind, t, key, self._key(ev[3]), 0, 0, 0)
        elif kind == RETRY:
            self._append(kind, t, key, 0, _int_or_zero(ev[3]), 1 if ev[4] else 0, 0)
        else:
            raise ValueError(f"not a call event kind: {kind}")

    def add_task_event(self, ev: tuple) -> None:
        kind = ev[0]
        if kind not in PINNED_KINDS and len(self._rows) >= self.limit * ROW:
            self.compact()
            if len(self._rows) >= self.limit * ROW:
                self.dropped += 1
                self.truncated += 1
                return
        flag = _task_encoding(ev)
        if flag:
            f = [0, 0, 0, 0, 0]
            for i in range(len(ev) - 2):
                code = (flag >> (4 + 2 * i)) & 3
                if code == ENC_STR:
                    f[i] = self._str(ev[2 + i])
                elif code == ENC_INT:
                    f[i] = ev[2 + i]
            self._rows.extend((kind, ev[1], f[0], f[1], f[2], f[3], f[4], flag))
            return
        if self._string_ix is None:
            self._unseal()
        self._extras.append(ev)
        self._rows.extend((kind, ev[1], len(self._extras) - 1, 0, 0, 0, 0, 0))

    def compact(self) -> None:
        """The cap is reached: double k until at most half the cap remains (or no
        call event is left to drop), dropping the rows of calls out of the sample."""
        target = self.limit // 2
        while len(self) > target:
            before = len(self)
            self.sample_every *= 2
            rows = self._rows
            kept = array("q")
            any_call = False
            for base in range(0, len(rows), ROW):
                if rows[base] in CALL_KINDS:
                    if not self._keeps_row(base):
                        continue
                    any_call = True
                kept.extend(rows[base:base + ROW])
            self._rows = kept
            self.dropped += before - len(self)
            if not any_call:
                break

    def presample(self, expected_events: int) -> None:
        """A call phase of a known size is committed: if its events will pass the
        cap anyway, sample from the start (k: the least power of two that fits them)
        rather than record, compact and drop."""
        k = self.sample_every
        while expected_events // k > self.limit - len(self):
            k *= 2
        self.sample_every = k

    def trim(self) -> None:
        """The task ended: give back unused room (an array('q') grows by
        over-allocation), and seal the trace: names and task events become
        tuples and the name index is dropped, so a retained trace holds no
        container the cyclic GC must scan. A late event unseals it."""
        self._rows = array("q", self._rows)
        if self._string_ix is not None:
            self._strings = tuple(self._strings)
            self._string_ix = None
            self._extras = tuple(self._extras)

    def _unseal(self) -> None:
        """A late event after trim() (a cancelled call's answer): recording resumes."""
        self._strings = list(self._strings)
        self._string_ix = {v: i for i, v in enumerate(self._strings)}
        self._extras = list(self._extras)

    # ---- reading ---------------------------------------------------------------------

    @property
    def events(self) -> list[tuple]:
        """The events in their tuple form, in order (for the export; decoded on each read)."""
        rows, s, cs = self._rows, self._strings, self._call_str
        out: list[tuple] = []
        for base in range(0, len(rows), ROW):
            kind, t, a, b, c, d, e = rows[base:base + 7]
            if kind == SENT:
                out.append((kind, t, cs(a), s[b], c, cs(d), s[e]))
            elif kind == DONE:
                out.append((kind, t, cs(a), s[b], c, s[d], e))
            elif kind == IO_WAIT:
                out.append((kind, t, cs(a), c, s[d]))
            elif kind == IO_DONE:
                out.append((kind, t, cs(a), bool(c)))
            elif kind == SUBCALL:
                out.append((kind, t, cs(a), cs(b)))
            elif kind == RETRY:
                out.append((kind, t, cs(a), c, bool(d)))
            elif rows[base + 7]:
                out.append(_task_decoded(rows, base, s))
            else:
                out.append(self._extras[a])
        return out


def _task_encoding(ev: tuple) -> int:
    """The row flag of a task-level event its row can hold (0: keep the tuple):
    after kind and t at most 5 fields, each a str (a string-table index), an int
    of |v| < 2**62, or the empty tuple. Bit 0 set, bits 1-3 the field count, then
    2 bits a field (ENC_INT / ENC_STR / ENC_EMPTY)."""
    n = len(ev) - 2
    if not 0 <= n <= 5:
        return 0
    flag = 1 | (n << 1)
    for i in range(n):
        v = ev[2 + i]
        tv = type(v)
        if tv is str:
            flag |= ENC_STR << (4 + 2 * i)
        elif tv is int:
            if not -_LIM < v < _LIM:
                return 0
        elif tv is tuple and not v:
            flag |= ENC_EMPTY << (4 + 2 * i)
        else:
            return 0
    return flag


def _task_decoded(rows, base: int, strings) -> tuple:
    flag = rows[base + 7]
    out = [rows[base], rows[base + 1]]
    for i in range((flag >> 1) & 7):
        code = (flag >> (4 + 2 * i)) & 3
        v = rows[base + 2 + i]
        out.append(strings[v] if code == ENC_STR else () if code == ENC_EMPTY else v)
    return tuple(out)


class CallRecorder:
    """The per-call hooks over the store's ``tasks`` (task id -> TraceBuffer).
    ``now_us`` is the trace clock, stamped once per dispatch-actor batch."""

    __slots__ = ("tasks", "now_us")

    def __init__(self, tasks: dict) -> None:
        self.tasks = tasks
        self.now_us = 0

    def _recording(self, task_id, call_id: str) -> TraceBuffer | None:
        """The trace that records an event of ``call_id`` now; None for an unknown
        task or a call out of the sample (counted as dropped)."""
        tr = self.tasks.get(task_id)
        if tr is None:
            return None
        if tr.sample_every != 1 and not tr.keeps(call_id):
            tr.dropped += 1
            return None
        return tr

    def call_sent(self, cmd) -> None:
        """The dispatch actor sent ExecuteCall for a DispatchCallCmd."""
        call_id = cmd.call_id
        tr = self._recording(cmd.task_id, call_id)
        if tr is None:
            return
        tr._append(SENT, self.now_us, tr._key(call_id), tr._str(cmd.executor_id), _int_or_zero(cmd.attempt_seq),
                   tr._key(cmd.parent_call_id), tr._str(cmd.function_id))

    def call_done(self, p: dict, call_id: str, executor_id: str, error_kind: str) -> None:
        """An accepted CallCompleted (error_kind "") or CallFailed frame, ``p`` its payload."""
        task_id = p.get("taskId")
        if type(task_id) is not str or type(call_id) is not str:
            return
        tr = self._recording(task_id, call_id)
        if tr is None:
            return
        tr._append(DONE, self.now_us, tr._key(call_id), tr._str(executor_id), _int_or_zero(p.get("attemptSeq")),
                   tr._str(error_kind), _int_or_zero(p.get("budgetUsedMs", 0)))

    def subcall(self, task_id, parent_call_id: str, child_call_id: str) -> None:
        """A call asked for a subcall (SUBCALL event); ``task_id`` as a frame gave it."""
        if type(task_id) is not str or type(parent_call_id) is not str or type(child_call_id) is not str:
            return
        tr = self._recording(task_id, parent_call_id)
        if tr is None:
            return
        tr._append(SUBCALL, self.now_us, tr._key(parent_call_id), tr._key(child_call_id), 0, 0, 0)
