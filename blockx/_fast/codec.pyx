# UDS frame codec (compiled; twin: codec_py.py, whose docstring states the wire
# format and the decoder's rules; both must behave identically, error messages
# included, which the parity tests check).
#
# Decoding theory:
# - Whole frames inside a chunk are decoded straight from the chunk's buffer:
#   a frame written from one of the templates (the per-call and per-round-trip
#   frames) is read field by field (see "decoding the template frames"); any
#   other JSON is copied into a fresh bytes object for orjson (cheaper than a
#   memoryview slice for small frames) and a sidecar is copied once.
# - Only the tail of a chunk (one partial frame) is kept. Its length prefix and
#   first 8 body bytes go to a small C array; once they are known the rest of
#   the frame is written in place into bytes objects of the final size: either
#   the whole body, or, for a well-formed BXB1 header, the JSON part and the
#   sidecar separately, so even a sidecar spread over many chunks is copied
#   exactly once and never re-copied when the frame completes.
# - FrameTooLarge fires on the length prefix, before anything is allocated.
# - boundscheck is off globally: every read below is guarded by an explicit
#   length check against the buffer it reads from.

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize
from cpython.bytes cimport PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem
from cpython.list cimport PyList_GET_SIZE
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_GET_LENGTH
from libc.stdint cimport uint32_t
from libc.string cimport memcmp, memcpy


cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void* PyUnicode_DATA(object o)
    object PyLong_FromLongLong(long long v)
    dict _PyDict_NewPresized(Py_ssize_t minused)

import orjson

from blockx._fast.codec_py import check_envelope, json_kind
from blockx._fast.errors import (
    BadMagic,
    FrameError,
    FrameTooLarge,
    InvalidJson,
    JsonLengthOutOfRange,
    NotAnObject,
    TruncatedFrame,
)

MAX_FRAME_BYTES = 16 * 1024 * 1024
MAGIC = b"BXB1"

cdef enum:
    _MAX = 16 * 1024 * 1024
    _IDLE = 0      # no partial frame
    _PREFIX = 1    # collecting the 4-byte length prefix into _hdr
    _HDR = 2       # collecting the first min(n, 8) body bytes into _hdr[4:]
    _BODY = 3      # filling _body (generic path)
    _STREAM = 4    # filling _json then _side (well-formed BXB1 header)

cdef object _dumps = orjson.dumps
cdef object _loads = orjson.loads
cdef object _JSONDecodeError = orjson.JSONDecodeError
cdef object _messageType = "messageType"


cdef inline uint32_t _be32(const unsigned char* p) noexcept nogil:
    return ((<uint32_t>p[0]) << 24) | ((<uint32_t>p[1]) << 16) | ((<uint32_t>p[2]) << 8) | p[3]


cdef inline void _put_be32(unsigned char* p, uint32_t v) noexcept nogil:
    p[0] = (v >> 24) & 0xFF
    p[1] = (v >> 16) & 0xFF
    p[2] = (v >> 8) & 0xFF
    p[3] = v & 0xFF


cdef object _too_large_body(Py_ssize_t n):
    return FrameTooLarge(f"frame body of {n} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")


cdef object _too_large_prefix(uint32_t n):
    return FrameTooLarge(f"frame length {n} exceeds the {MAX_FRAME_BYTES}-byte limit")


# --- encoding --------------------------------------------------------------------------

cpdef bytes encode_frame(object envelope, object sidecar=None):
    """One frame for `envelope` with an optional binary sidecar (bytes-like).
    Raises FrameTooLarge when the body would exceed MAX_FRAME_BYTES."""
    cdef bytes body = _dumps(envelope)
    cdef Py_ssize_t blen = PyBytes_GET_SIZE(body)
    cdef Py_ssize_t n
    cdef bytes out
    cdef unsigned char* q
    cdef Py_buffer view
    if sidecar is None:
        if blen > _MAX:
            raise _too_large_body(blen)
        out = PyBytes_FromStringAndSize(NULL, 4 + blen)
        q = <unsigned char*>PyBytes_AS_STRING(out)
        _put_be32(q, <uint32_t>blen)
        memcpy(q + 4, PyBytes_AS_STRING(body), blen)
        return out
    PyObject_GetBuffer(sidecar, &view, PyBUF_SIMPLE)
    try:
        n = 8 + blen + view.len
        if n > _MAX:
            raise _too_large_body(n)
        out = PyBytes_FromStringAndSize(NULL, 4 + n)
        q = <unsigned char*>PyBytes_AS_STRING(out)
        _put_be32(q, <uint32_t>n)
        memcpy(q + 4, b"BXB1", 4)
        _put_be32(q + 8, <uint32_t>blen)
        memcpy(q + 12, PyBytes_AS_STRING(body), blen)
        if view.len:
            memcpy(q + 12 + blen, view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return out


cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object s)
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL

cdef object _Fragment = orjson.Fragment

# Frames written from a template (encode_execute_call, encode_call_completed,
# encode_resume_result, encode_call_waiting_subcall):
# the fixed text of the envelope between its fields, then the fields as plain
# strings (written between quotes as they are), non-negative ints or raw JSON.
cdef bytes _X0 = b'{"messageType":"ExecuteCall","callId":"'
cdef bytes _X1 = b'","requestId":"","payload":{"taskId":"'
cdef bytes _X2 = b'","functionId":"'
cdef bytes _X3 = b'","functionCodeDigest":"'
cdef bytes _X4 = b'","entrySelector":"'
cdef bytes _X5 = b'","args":'
cdef bytes _X6 = b',"parentCallId":"'
cdef bytes _X7 = b'","callBudgetMs":'
cdef bytes _X8 = b',"attemptSeq":'
cdef bytes _X9 = b'}}'
cdef bytes _C0 = b'{"messageType":"CallCompleted","callId":"'
cdef bytes _C1 = b'","requestId":"","payload":{"taskId":"'
cdef bytes _C2 = b'","attemptSeq":'
cdef bytes _C3 = b',"output":'
cdef bytes _C4 = b',"budgetUsedMs":'
cdef bytes _C5 = b',"startedAtMs":'
cdef bytes _C6 = b',"durationMs":'
cdef bytes _R0 = b'{"messageType":"ResumeCall","callId":"'
cdef bytes _R1 = b'","requestId":"'
cdef bytes _R2 = b'","payload":{"resumeKind":"'
cdef bytes _R3 = b'","result":'
cdef bytes _W0 = b'{"messageType":"CallWaiting","callId":"'
cdef bytes _W1 = b'","payload":{"taskId":"'
cdef bytes _W2 = b',"waitKind":"subcall","functionId":"'
cdef bytes _W3 = b',"grantedBudgetMs":'
cdef bytes _W4 = b',"ancestry":'
# Each template's fixed text in order: segment 2*i of its frame is text i.
cdef tuple _EXECUTE_TEXT = (_X0, _X1, _X2, _X3, _X4, _X5, _X6, _X7, _X8, _X9)
cdef tuple _COMPLETED_TEXT = (_C0, _C1, _C2, _C3, _C4, _C5, _C6, _X9)
cdef tuple _RESUME_TEXT = (_R0, _R1, _R2, _R3, _C4, _X9)
cdef tuple _WAITING_TEXT = (_W0, _R1, _W1, _C2, _W2, _X5, _W3, _W4, _X9)


cdef struct _Seg:
    const char* p
    Py_ssize_t n


cdef inline bint _plain(object s, _Seg* seg) except -1:
    # seg = s when s is a str orjson writes as-is between quotes (printable ASCII
    # without '"' or backslash); False for anything else.
    cdef Py_ssize_t n, i
    cdef const char* p
    cdef unsigned char c
    if type(s) is not str or not PyUnicode_IS_ASCII(s):
        return False
    p = PyUnicode_AsUTF8AndSize(s, &n)
    for i in range(n):
        c = <unsigned char>p[i]
        if c < 0x20 or c > 0x7e or c == 0x22 or c == 0x5c:
            return False
    seg.p = p
    seg.n = n
    return True


cdef inline bint _digits(object v, char* buf, _Seg* seg) except -1:
    # seg = the decimal text of a non-negative exact int below 10**18, written
    # right-aligned into buf (20 bytes); False for anything else.
    cdef long long x
    cdef Py_ssize_t k = 20
    if type(v) is not int or v < 0 or v >= 1000000000000000000:
        return False
    x = v
    while True:
        k -= 1
        buf[k] = <char>(48 + x % 10)
        x //= 10
        if x == 0:
            break
    seg.p = buf + k
    seg.n = 20 - k
    return True


cdef inline void _lit(bytes b, _Seg* seg) noexcept:
    seg.p = PyBytes_AS_STRING(b)
    seg.n = PyBytes_GET_SIZE(b)


cdef inline int _text(tuple text, _Seg* segs) except -1:
    # A template's fixed text into the even segments, between its fields.
    cdef Py_ssize_t i
    for i in range(len(text)):
        _lit(<bytes>text[i], &segs[2 * i])
    return 0


cdef inline bint _raw(object b, _Seg* seg) noexcept:
    if type(b) is not bytes:
        return False
    seg.p = PyBytes_AS_STRING(b)
    seg.n = PyBytes_GET_SIZE(b)
    return True


cdef bytes _frame_of(_Seg* segs, Py_ssize_t count):
    # One frame: the length prefix, then the segments back to back.
    cdef Py_ssize_t blen = 0, i
    for i in range(count):
        blen += segs[i].n
    if blen > _MAX:
        raise _too_large_body(blen)
    cdef bytes out = PyBytes_FromStringAndSize(NULL, 4 + blen)
    cdef unsigned char* q = <unsigned char*>PyBytes_AS_STRING(out)
    _put_be32(q, <uint32_t>blen)
    q += 4
    for i in range(count):
        memcpy(q, segs[i].p, segs[i].n)
        q += segs[i].n
    return out


cpdef bytes encode_execute_call(object call_id, object task_id, object function_id, object digest,
                                object entry_selector, object args_json, object parent_call_id,
                                object budget_ms, object attempt_seq):
    """The ExecuteCall frame of one call, byte for byte encode_frame's (the twin
    documents it), written from a template; any field outside the template's
    plain shapes goes through encode_frame itself."""
    cdef _Seg g[19]
    cdef char bbuf[20]
    cdef char abuf[20]
    _text(_EXECUTE_TEXT, g)
    if (_plain(call_id, &g[1]) and _plain(task_id, &g[3]) and _plain(function_id, &g[5])
            and _plain(digest, &g[7]) and _plain(entry_selector, &g[9]) and _raw(args_json, &g[11])
            and _plain(parent_call_id, &g[13]) and _digits(budget_ms, bbuf, &g[15])
            and _digits(attempt_seq, abuf, &g[17])):
        return _frame_of(g, 19)
    return encode_frame({"messageType": "ExecuteCall", "callId": call_id, "requestId": "",
                         "payload": {"taskId": task_id, "functionId": function_id,
                                     "functionCodeDigest": digest, "entrySelector": entry_selector,
                                     "args": _Fragment(args_json), "parentCallId": parent_call_id,
                                     "callBudgetMs": budget_ms, "attemptSeq": attempt_seq}})


cpdef bytes encode_call_completed(object call_id, object task_id, object attempt_seq,
                                  object output_json, object budget_used_ms, object started_at_ms,
                                  object duration_ms):
    """The CallCompleted frame of one call (the executor's answer), byte for byte
    encode_frame's (the twin documents it), written from a template; any field
    outside the template's plain shapes goes through encode_frame itself."""
    cdef _Seg g[15]
    cdef char abuf[20]
    cdef char ubuf[20]
    cdef char sbuf[20]
    cdef char dbuf[20]
    _text(_COMPLETED_TEXT, g)
    if (_plain(call_id, &g[1]) and _plain(task_id, &g[3]) and _digits(attempt_seq, abuf, &g[5])
            and _raw(output_json, &g[7]) and _digits(budget_used_ms, ubuf, &g[9])
            and _digits(started_at_ms, sbuf, &g[11]) and _digits(duration_ms, dbuf, &g[13])):
        return _frame_of(g, 15)
    return encode_frame({"messageType": "CallCompleted", "callId": call_id, "requestId": "",
                         "payload": {"taskId": task_id, "attemptSeq": attempt_seq,
                                     "output": _Fragment(output_json), "budgetUsedMs": budget_used_ms,
                                     "startedAtMs": started_at_ms, "durationMs": duration_ms}})


cpdef bytes encode_resume_result(object call_id, object request_id, object resume_kind,
                                 object result_json, object budget_used_ms):
    """The ResumeCall frame that answers a wait with a result and no sidecar (a
    subcall's output, an IO result), byte for byte encode_frame's (the twin
    documents it), written from a template; any field outside the template's
    plain shapes goes through encode_frame itself."""
    cdef _Seg g[11]
    cdef char ubuf[20]
    _text(_RESUME_TEXT, g)
    if (_plain(call_id, &g[1]) and _plain(request_id, &g[3]) and _plain(resume_kind, &g[5])
            and _raw(result_json, &g[7]) and _digits(budget_used_ms, ubuf, &g[9])):
        return _frame_of(g, 11)
    return encode_frame({"messageType": "ResumeCall", "callId": call_id, "requestId": request_id,
                         "payload": {"resumeKind": resume_kind, "result": _Fragment(result_json),
                                     "budgetUsedMs": budget_used_ms}})


cpdef bytes encode_call_waiting_subcall(object call_id, object request_id, object task_id,
                                        object attempt_seq, object function_id, object args_json,
                                        object granted_budget_ms, object ancestry_json):
    """The CallWaiting(subcall) frame of a call that asks for a subcall (the
    executor's), byte for byte encode_frame's (the twin documents it), written
    from a template; any field outside the template's plain shapes goes through
    encode_frame itself."""
    cdef _Seg g[17]
    cdef char abuf[20]
    cdef char bbuf[20]
    _text(_WAITING_TEXT, g)
    if (_plain(call_id, &g[1]) and _plain(request_id, &g[3]) and _plain(task_id, &g[5])
            and _digits(attempt_seq, abuf, &g[7]) and _plain(function_id, &g[9])
            and _raw(args_json, &g[11]) and _digits(granted_budget_ms, bbuf, &g[13])
            and _raw(ancestry_json, &g[15])):
        return _frame_of(g, 17)
    return encode_frame({"messageType": "CallWaiting", "callId": call_id, "requestId": request_id,
                         "payload": {"taskId": task_id, "attemptSeq": attempt_seq, "waitKind": "subcall",
                                     "functionId": function_id, "args": _Fragment(args_json),
                                     "grantedBudgetMs": granted_budget_ms,
                                     "ancestry": _Fragment(ancestry_json)}})


cpdef bytes encode_frames(object items):
    """Many frames, back to back, in one buffer: `items` is an iterable of
    (envelope, sidecar-or-None)."""
    cdef list parts = []   # alternating body (bytes), sidecar (bytes or None)
    cdef Py_ssize_t total = 0
    cdef Py_ssize_t n, blen, slen, i, count
    cdef bytes body, side, out
    cdef unsigned char* q
    for envelope, sidecar in items:
        body = _dumps(envelope)
        blen = PyBytes_GET_SIZE(body)
        if sidecar is None:
            if blen > _MAX:
                raise _too_large_body(blen)
            parts.append(body)
            parts.append(None)
            total += 4 + blen
        else:
            side = sidecar if PyBytes_CheckExact(sidecar) else bytes(memoryview(sidecar))
            n = 8 + blen + PyBytes_GET_SIZE(side)
            if n > _MAX:
                raise _too_large_body(n)
            parts.append(body)
            parts.append(side)
            total += 4 + n
    out = PyBytes_FromStringAndSize(NULL, total)
    q = <unsigned char*>PyBytes_AS_STRING(out)
    count = PyList_GET_SIZE(parts)
    i = 0
    while i < count:
        body = <bytes>parts[i]
        blen = PyBytes_GET_SIZE(body)
        if parts[i + 1] is None:
            _put_be32(q, <uint32_t>blen)
            memcpy(q + 4, PyBytes_AS_STRING(body), blen)
            q += 4 + blen
        else:
            side = <bytes>parts[i + 1]
            slen = PyBytes_GET_SIZE(side)
            _put_be32(q, <uint32_t>(8 + blen + slen))
            memcpy(q + 4, b"BXB1", 4)
            _put_be32(q + 8, <uint32_t>blen)
            memcpy(q + 12, PyBytes_AS_STRING(body), blen)
            if slen:
                memcpy(q + 12 + blen, PyBytes_AS_STRING(side), slen)
            q += 12 + blen + slen
        i += 2
    return out


# --- decoding --------------------------------------------------------------------------

cdef inline object _load_json(object raw):
    try:
        return _loads(raw)
    except _JSONDecodeError as exc:
        raise InvalidJson(f"invalid JSON in frame envelope: {exc}") from None


cdef inline int _check_mt(object env) except -1:
    # Fast path of codec_py.check_envelope; the twin builds the error message.
    cdef PyObject* mt = PyDict_GetItem(env, _messageType)
    if mt == NULL or type(<object>mt) is not str or PyUnicode_GET_LENGTH(<object>mt) == 0:
        check_envelope(env)
    return 0


# --- decoding the template frames ----------------------------------------------------
#
# A frame whose bytes follow one of the templates above exactly (the frames of
# every call and round trip, written by the encoders above, and an IO wait as
# the executor writes it) is decoded here
# without orjson for its envelope: the fields are read between the fixed texts
# and the two dicts are built with this module's key strings. Those keys are
# the interned strings the readers of the frame look up (validate, the
# dispatcher), so each lookup matches by identity instead of comparing the
# text; measured with callgrind: -23% to decode a CallCompleted and -1.5k
# instructions in the lookups after it. The result is exactly what
# orjson.loads gives (same keys in the same order, same values); anything else
# (a string with an escape or a non-ASCII byte, a float where an int stands,
# whitespace, another key order, a raw value orjson rejects or nested deeper
# than _RAW_MAX_DEPTH) returns None and the frame takes orjson whole, so its
# verdict and error message are orjson's, as in the twin.

cdef enum:
    _F_STR = 0          # a JSON string of printable ASCII without escapes
    _F_INT = 1          # an integer of at most 18 digits
    _F_RAW = 2          # any JSON value (an integer inline, anything else through orjson)
    _F_CONST = 3        # a fixed value in the fixed text (no slot)
    _RAW_MAX_DEPTH = 256


@cython.final
cdef class _Shape:
    """One template's fields in order: (in_payload, key, kind, const value)."""
    cdef object mt              # the messageType value
    cdef tuple text             # the fixed text: text[i] before slot i, the last after the last slot
    cdef tuple fields
    cdef Py_ssize_t n_slots
    cdef Py_ssize_t n_env       # envelope fields before "payload"
    cdef Py_ssize_t n_payload

    def __init__(self, mt, tuple text, tuple fields):
        self.mt = mt
        self.text = text
        self.fields = fields
        self.n_slots = sum(1 for f in fields if f[2] != _F_CONST)
        self.n_env = sum(1 for f in fields if not f[0])
        self.n_payload = len(fields) - self.n_env
        if len(text) != self.n_slots + 1:
            raise ValueError(f"template {mt}: {len(text)} texts for {self.n_slots} slots")


cdef object _K_CALL = "callId"
cdef object _K_REQ = "requestId"
cdef object _K_PAYLOAD = "payload"
cdef object _EMPTY = ""

cdef _Shape _EXECUTE_SHAPE = _Shape("ExecuteCall", _EXECUTE_TEXT, (
    (False, _K_CALL, _F_STR, None), (False, _K_REQ, _F_CONST, _EMPTY),
    (True, "taskId", _F_STR, None), (True, "functionId", _F_STR, None),
    (True, "functionCodeDigest", _F_STR, None), (True, "entrySelector", _F_STR, None),
    (True, "args", _F_RAW, None), (True, "parentCallId", _F_STR, None),
    (True, "callBudgetMs", _F_INT, None), (True, "attemptSeq", _F_INT, None)))
cdef _Shape _COMPLETED_SHAPE = _Shape("CallCompleted", _COMPLETED_TEXT, (
    (False, _K_CALL, _F_STR, None), (False, _K_REQ, _F_CONST, _EMPTY),
    (True, "taskId", _F_STR, None), (True, "attemptSeq", _F_INT, None),
    (True, "output", _F_RAW, None), (True, "budgetUsedMs", _F_INT, None),
    (True, "startedAtMs", _F_INT, None), (True, "durationMs", _F_INT, None)))
cdef _Shape _RESUME_SHAPE = _Shape("ResumeCall", _RESUME_TEXT, (
    (False, _K_CALL, _F_STR, None), (False, _K_REQ, _F_STR, None),
    (True, "resumeKind", _F_STR, None), (True, "result", _F_RAW, None),
    (True, "budgetUsedMs", _F_INT, None)))
cdef _Shape _WAITING_SHAPE = _Shape("CallWaiting", _WAITING_TEXT, (
    (False, _K_CALL, _F_STR, None), (False, _K_REQ, _F_STR, None),
    (True, "taskId", _F_STR, None), (True, "attemptSeq", _F_INT, None),
    (True, "waitKind", _F_CONST, "subcall"), (True, "functionId", _F_STR, None),
    (True, "args", _F_RAW, None), (True, "grantedBudgetMs", _F_INT, None),
    (True, "ancestry", _F_RAW, None)))


# CallWaiting(io) as the executor writes it (encode_frame of messages.call_waiting_io,
# without a body; orjson writes a plain string as it is).
cdef _Shape _WAITING_IO_SHAPE = _Shape("CallWaiting", (
    _W0, _R1, _W1, _C2, b',"waitKind":"io","backend":"', b'","request":', _X9), (
    (False, _K_CALL, _F_STR, None), (False, _K_REQ, _F_STR, None),
    (True, "taskId", _F_STR, None), (True, "attemptSeq", _F_INT, None),
    (True, "waitKind", _F_CONST, "io"), (True, "backend", _F_STR, None),
    (True, "request", _F_RAW, None)))


cdef inline Py_ssize_t _str_end(const unsigned char* p, Py_ssize_t i, Py_ssize_t n) noexcept:
    """Index of the closing quote of a plain string starting at i; -1 if it is not one."""
    cdef unsigned char c
    while i < n:
        c = p[i]
        if c == 0x22:
            return i
        if c == 0x5C or c < 0x20 or c >= 0x7F:
            return -1
        i += 1
    return -1


cdef inline Py_ssize_t _int_end(const unsigned char* p, Py_ssize_t i, Py_ssize_t n,
                                long long* out) noexcept:
    """End of a JSON integer of at most 18 digits starting at i (its value in out); -1 if none."""
    cdef bint neg = False
    cdef long long v = 0
    cdef Py_ssize_t d0
    if i < n and p[i] == 0x2D:
        neg = True
        i += 1
    d0 = i
    while i < n and 0x30 <= p[i] <= 0x39:
        v = v * 10 + (p[i] - 0x30)
        i += 1
    if i == d0 or i - d0 > 18 or (p[d0] == 0x30 and i - d0 > 1):
        return -1
    out[0] = -v if neg else v
    return i


cdef inline Py_ssize_t _raw_end(const unsigned char* p, Py_ssize_t i, Py_ssize_t n) noexcept:
    """Where the JSON value starting at i ends (the ',' '}' or ']' after it at its
    level), for a valid value; orjson checks the value itself. -1 if it runs to
    the end or nests deeper than _RAW_MAX_DEPTH."""
    cdef int depth = 0
    cdef unsigned char c
    while i < n:
        c = p[i]
        if c == 0x22:
            i += 1
            while i < n:
                c = p[i]
                if c == 0x5C:
                    i += 2
                    continue
                if c == 0x22:
                    break
                i += 1
        elif c == 0x5B or c == 0x7B:
            depth += 1
            if depth > _RAW_MAX_DEPTH:
                return -1
        elif c == 0x5D or c == 0x7D:
            if depth == 0:
                return i
            depth -= 1
        elif c == 0x2C and depth == 0:
            return i
        i += 1
    return -1


cdef inline bint _at(const unsigned char* p, Py_ssize_t i, Py_ssize_t n, bytes text) noexcept:
    cdef Py_ssize_t k = PyBytes_GET_SIZE(text)
    return i + k <= n and memcmp(p + i, PyBytes_AS_STRING(text), k) == 0


cdef object _from_shape(_Shape shape, const unsigned char* p, Py_ssize_t n):
    """The envelope of a frame that follows `shape` exactly, or None."""
    cdef tuple text = shape.text
    cdef tuple fields = shape.fields
    cdef Py_ssize_t i = PyBytes_GET_SIZE(<bytes>text[0])   # the first text was matched by the caller
    cdef Py_ssize_t e, j, slot = 0
    cdef long long v
    cdef int kind
    cdef list values = [None] * len(fields)
    for j in range(len(fields)):
        f = <tuple>fields[j]
        kind = f[2]
        if kind == _F_CONST:
            values[j] = f[3]
            continue
        if kind == _F_STR:
            e = _str_end(p, i, n)
            if e < 0:
                return None
            if e == i:
                values[j] = _EMPTY
            else:
                s = PyUnicode_New(e - i, 127)
                memcpy(PyUnicode_DATA(s), p + i, e - i)
                values[j] = s
        elif kind == _F_INT:
            e = _int_end(p, i, n, &v)
            if e < 0:
                return None
            values[j] = PyLong_FromLongLong(v)
        else:
            e = _int_end(p, i, n, &v)
            if e >= 0 and e < n and (p[e] == 0x2C or p[e] == 0x7D):
                values[j] = PyLong_FromLongLong(v)
            else:
                e = _raw_end(p, i, n)
                if e < 0:
                    return None
                try:
                    values[j] = _loads(PyBytes_FromStringAndSize(<char*>p + i, e - i))
                except _JSONDecodeError:
                    return None
        slot += 1
        if not _at(p, e, n, <bytes>text[slot]):
            return None
        i = e + PyBytes_GET_SIZE(<bytes>text[slot])
    if i != n:
        return None
    cdef dict env = _PyDict_NewPresized(shape.n_env + 2)
    cdef dict payload = _PyDict_NewPresized(shape.n_payload)
    env[_messageType] = shape.mt
    for j in range(len(fields)):
        f = <tuple>fields[j]
        if f[0]:
            payload[f[1]] = values[j]
        else:
            env[f[1]] = values[j]
    env[_K_PAYLOAD] = payload
    return env


cdef inline object _from_template(const unsigned char* p, Py_ssize_t n):
    """The envelope of a frame written from one of the templates, or None."""
    cdef _Shape shape
    if n < 48 or p[1] != 0x22 or p[15] != 0x22:      # '{"messageType":"' + at least a name
        return None
    cdef unsigned char c = p[16]
    if c == 0x43:               # 'C'
        if p[20] != 0x43:       # CallWaiting: a subcall's, else an IO's
            if not _at(p, 0, n, _W0):
                return None
            env = _from_shape(_WAITING_SHAPE, p, n)
            return env if env is not None else _from_shape(_WAITING_IO_SHAPE, p, n)
        shape = _COMPLETED_SHAPE
    elif c == 0x45:             # 'E'
        shape = _EXECUTE_SHAPE
    elif c == 0x52:             # 'R'
        shape = _RESUME_SHAPE
    else:
        return None
    if not _at(p, 0, n, <bytes>shape.text[0]):
        return None
    return _from_shape(shape, p, n)


cdef object _decode_body(const unsigned char* p, Py_ssize_t n, object owner):
    """(envelope, sidecar-or-None) for the n-byte body at p. `owner`, when not
    None, is a bytes object holding exactly this body (saves a copy)."""
    cdef uint32_t jl
    cdef object env
    if n == 0:
        raise BadMagic("empty frame body; expected '{' (JSON envelope) or b'BXB1' (sidecar frame)")
    if p[0] == 0x7B:  # '{'
        env = _from_template(p, n)
        if env is not None:
            return (env, None)
        env = _load_json(owner if owner is not None else
                         PyBytes_FromStringAndSize(<char*>p, n))
        # A '{'-led valid JSON document is always an object.
        _check_mt(env)
        return (env, None)
    if n >= 4 and memcmp(p, b"BXB1", 4) == 0:
        if n < 8:
            raise JsonLengthOutOfRange(
                f"BXB1 frame body of {n} bytes is shorter than its 8-byte header")
        jl = _be32(p + 4)
        if jl > <uint32_t>(n - 8):
            raise JsonLengthOutOfRange(
                f"BXB1 JSON length {jl} runs past the frame end "
                f"(a {n}-byte body leaves {n - 8} bytes after the header)")
        env = _load_json(PyBytes_FromStringAndSize(<char*>p + 8, jl))
        if type(env) is not dict:
            raise NotAnObject(f"frame envelope must be a JSON object, got {json_kind(env)}")
        _check_mt(env)
        return (env, PyBytes_FromStringAndSize(<char*>p + 8 + jl, n - 8 - jl))
    raise BadMagic(
        f"frame body starts with {PyBytes_FromStringAndSize(<char*>p, 4 if n > 4 else n)!r}; "
        "expected '{' (JSON envelope) or b'BXB1' (sidecar frame)")


cdef object _decode_streamed(bytes js, bytes side):
    cdef object env = _load_json(js)
    if type(env) is not dict:
        raise NotAnObject(f"frame envelope must be a JSON object, got {json_kind(env)}")
    _check_mt(env)
    return (env, side)


@cython.final
cdef class FrameDecoder:
    """Incremental decoder: feed() it arbitrary chunks of the byte stream; it
    returns [(envelope, sidecar-or-None), ...] for every frame completed by the
    chunk and keeps the rest (at most one partial frame)."""

    def __cinit__(self):
        self._state = _IDLE
        self._got = 0
        self._n = 0
        self._jl = 0
        self._body = None
        self._json = None
        self._side = None
        self._error = None

    @property
    def buffered(self):
        """Bytes of an incomplete frame held back."""
        return self._got

    @property
    def failed(self):
        return self._error is not None

    cdef int _reset(self) except -1:
        self._state = _IDLE
        self._got = 0
        self._body = None
        self._json = None
        self._side = None
        return 0

    def feed(self, data):
        cdef list out = []
        cdef Py_buffer view
        err = self._error
        if err is not None:
            raise type(err)(str(err))
        try:
            if PyBytes_CheckExact(data):
                self._feed(<const unsigned char*>PyBytes_AS_STRING(data),
                           PyBytes_GET_SIZE(data), out)
            else:
                PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
                try:
                    self._feed(<const unsigned char*>view.buf, view.len, out)
                finally:
                    PyBuffer_Release(&view)
        except FrameError as exc:
            exc.frames = out
            self._error = exc
            self._reset()
            raise
        return out

    cdef int _feed(self, const unsigned char* p, Py_ssize_t size, list out) except -1:
        cdef Py_ssize_t off = 0
        cdef uint32_t n
        while off < size:
            if self._state == _IDLE:
                if size - off >= 4:
                    n = _be32(p + off)
                    if n > _MAX:
                        raise _too_large_prefix(n)
                    if size - off - 4 >= <Py_ssize_t>n:
                        out.append(_decode_body(p + off + 4, n, None))
                        off += 4 + <Py_ssize_t>n
                        continue
                self._state = _PREFIX
                self._got = 0
            off += self._advance(p + off, size - off, out)
        return 0

    cdef Py_ssize_t _advance(self, const unsigned char* p, Py_ssize_t avail,
                             list out) except -1:
        """Feed up to `avail` bytes at p into the pending frame; return how many
        were consumed (fewer than avail only when the frame completed)."""
        cdef Py_ssize_t used = 0, k, want, bo, room
        cdef uint32_t n, jl
        cdef unsigned char* dst
        cdef bytes body, js, side
        if self._state == _PREFIX:
            k = 4 - self._got
            if k > avail:
                k = avail
            memcpy(self._hdr + self._got, p, k)
            self._got += k
            used = k
            if self._got < 4:
                return used
            n = _be32(self._hdr)
            if n > _MAX:
                raise _too_large_prefix(n)
            self._n = n
            self._state = _HDR
        if self._state == _HDR:
            want = 4 + (self._n if self._n < 8 else 8)
            k = want - self._got
            if k > avail - used:
                k = avail - used
            memcpy(self._hdr + self._got, p + used, k)
            self._got += k
            used += k
            if self._got < want:
                return used
            if self._n <= 8:
                self._reset()
                out.append(_decode_body(self._hdr + 4, self._n, None))
                return used
            jl = _be32(self._hdr + 8)
            if memcmp(self._hdr + 4, b"BXB1", 4) == 0 and jl <= <uint32_t>(self._n - 8):
                self._jl = jl
                self._json = PyBytes_FromStringAndSize(NULL, jl)
                self._side = PyBytes_FromStringAndSize(NULL, self._n - 8 - jl)
                self._state = _STREAM
            else:
                self._body = PyBytes_FromStringAndSize(NULL, self._n)
                memcpy(PyBytes_AS_STRING(self._body), self._hdr + 4, 8)
                self._state = _BODY
        if self._state == _BODY:
            k = 4 + self._n - self._got
            if k > avail - used:
                k = avail - used
            memcpy(PyBytes_AS_STRING(self._body) + (self._got - 4), p + used, k)
            self._got += k
            used += k
            if self._got == 4 + self._n:
                body = self._body
                self._reset()
                out.append(_decode_body(<const unsigned char*>PyBytes_AS_STRING(body),
                                        PyBytes_GET_SIZE(body), body))
            return used
        # _STREAM: body offsets [8, 8+jl) go to _json, [8+jl, n) to _side.
        while used < avail and self._got < 4 + self._n:
            bo = self._got - 4
            if bo < 8 + self._jl:
                dst = <unsigned char*>PyBytes_AS_STRING(self._json) + (bo - 8)
                room = 8 + self._jl - bo
            else:
                dst = <unsigned char*>PyBytes_AS_STRING(self._side) + (bo - 8 - self._jl)
                room = self._n - bo
            k = room if room < avail - used else avail - used
            memcpy(dst, p + used, k)
            self._got += k
            used += k
        if self._got == 4 + self._n:
            js = self._json
            side = self._side
            self._reset()
            out.append(_decode_streamed(js, side))
        return used

    def eof(self):
        """The stream ended: raise TruncatedFrame if a frame was cut off."""
        cdef Py_ssize_t have = self._got
        if self._error is not None:
            return
        if self._state != _IDLE and have:
            if have < 4:
                msg = f"stream ended inside a frame length prefix ({have} of 4 bytes)"
            else:
                msg = f"stream ended inside a frame ({have - 4} of {self._n} body bytes received)"
            self._error = TruncatedFrame(msg)
            self._reset()
            raise TruncatedFrame(msg)
