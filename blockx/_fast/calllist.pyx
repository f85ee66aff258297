# cython: always_allow_keywords=False
# A builder's call list in packed form (compiled; twin: calllist_py.py, which
# documents what it holds and its rules). The per-entry loop runs in C; an
# entry that is not the common shape goes to the builder's own check, as in
# the twin.

cimport cython
from cpython cimport array as carray
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.string cimport memcpy
from array import array

import orjson

__all__ = ["PackedCalls", "pack_call_list"]

cdef object _dumps = orjson.dumps
cdef object _SORT = orjson.OPT_SORT_KEYS


@cython.final
cdef class PackedCalls:
    cdef readonly list fids
    cdef readonly object fidx
    cdef readonly bytes args
    cdef readonly object offs
    cdef readonly object spec_type

    def __init__(self, list fids, fidx, bytes args, offs, spec_type):
        self.fids = fids
        self.fidx = fidx
        self.args = args
        self.offs = offs
        self.spec_type = spec_type

    def __len__(self):
        return len(self.fidx)

    cdef object _spec(self, Py_ssize_t i):
        offs = self.offs
        return self.spec_type(self.fids[self.fidx[i]], self.args[offs[i]:offs[i + 1]])

    def __getitem__(self, i):
        if type(i) is not int:
            raise TypeError(f"PackedCalls indices must be integers, not {type(i).__name__}")
        cdef Py_ssize_t n = len(self.fidx)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("PackedCalls index out of range")
        return self._spec(i)

    def __iter__(self):
        cdef Py_ssize_t i
        for i in range(len(self.fidx)):
            yield self._spec(i)

    def __eq__(self, other):
        if isinstance(other, (PackedCalls, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None

    def clear(self):
        """Drop the calls (the dispatcher holds them now)."""
        self.fids = []
        self.fidx = array("I")
        self.args = b""
        self.offs = array("q", [0])

    def __repr__(self):
        return (f"<PackedCalls {len(self.fidx)} calls, {len(self.fids)} functions, "
                f"{len(self.args)} args bytes>")


def pack_call_list(entries, check_entry, spec_type):
    if type(entries) is not list:
        raise TypeError(f"entries must be a list, got {type(entries).__name__}")
    cdef list items = <list>entries
    cdef list fids = []
    cdef dict table = {}
    cdef Py_ssize_t n = len(items), i, size = 0, cap = 256, m
    cdef carray.array fidx = array("I")
    cdef carray.array offs = array("q", [0])
    cdef bytearray buf = bytearray(cap)
    cdef bytes b
    cdef unsigned int k
    carray.resize(fidx, n)
    carray.resize(offs, n + 1)
    for i in range(n):
        entry = items[i]
        kk = None
        if type(entry) is dict and len(<dict>entry) == 2:
            fid = (<dict>entry).get("functionId")
            args = (<dict>entry).get("args")
            if type(fid) is str and type(args) is list:
                kk = table.get(fid)
        if kk is None:
            fid, args = check_entry(i, entry)
            kk = table.get(fid)
            if kk is None:
                kk = table[fid] = len(fids)
                fids.append(fid)
        k = kk
        b = _dumps(args, option=_SORT)
        m = PyBytes_GET_SIZE(b)
        if size + m > cap:
            while size + m > cap:
                cap *= 2
            PyByteArray_Resize(buf, cap)
        memcpy(PyByteArray_AS_STRING(buf) + size, PyBytes_AS_STRING(b), m)
        size += m
        fidx.data.as_uints[i] = k
        offs.data.as_longlongs[i + 1] = size
    return PackedCalls(fids, fidx, PyBytes_FromStringAndSize(PyByteArray_AS_STRING(buf), size),
                       offs, spec_type)
