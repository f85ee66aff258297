"""A builder's call list in packed form (pure-Python twin of calllist.pyx).

The callList builder turns a payload of N entries into N calls. As a list of
CallSpecs that is N tuples and N args objects, which the Calls phase then walks
twice more (resolving function ids, packing the dispatcher's queue). A
PackedCalls holds the same calls as the dispatcher's compact queue does:

- ``fids``: the distinct function ids, in order of first appearance;
- ``fidx``: array('I'), per call an index into ``fids``;
- ``args``: every call's canonical args JSON, concatenated in one bytes;
- ``offs``: array('q') of N + 1 offsets, call i's args are ``args[offs[i]:offs[i+1]]``.

It is still a sequence of the builder's CallSpec (len, index, iterate, compare
with a list), so code that reads a call list reads it unchanged; the Calls phase
recognises it and hands its arrays to the dispatcher as they are.

``pack_call_list(entries, check_entry, spec_type)`` builds one from parsed
payload entries. The common entry (an exact dict of exactly a known function
id and an args list) is packed at once; any other entry, and the first entry of
every function id, goes through ``check_entry(i, entry) -> (function_id,
args)``, the builder's own validation, which raises its error for a bad entry.
So the packed path accepts and refuses exactly what the builder's checks do.
Args are encoded canonically (sorted keys, compact) straight into one growing
buffer: no per-call bytes object outlives its call's iteration."""
from __future__ import annotations

from array import array
from typing import Any, Callable, Iterator

import orjson

__all__ = ["PackedCalls", "pack_call_list"]

_dumps = orjson.dumps
_SORT = orjson.OPT_SORT_KEYS


class PackedCalls:
    __slots__ = ("fids", "fidx", "args", "offs", "spec_type")

    def __init__(self, fids: list, fidx: Any, args: bytes, offs: Any, spec_type: Callable) -> None:
        self.fids = fids
        self.fidx = fidx
        self.args = args
        self.offs = offs
        self.spec_type = spec_type

    def __len__(self) -> int:
        return len(self.fidx)

    def _spec(self, i: int) -> Any:
        offs = self.offs
        return self.spec_type(self.fids[self.fidx[i]], self.args[offs[i]:offs[i + 1]])

    def __getitem__(self, i: int) -> Any:
        if type(i) is not int:
            raise TypeError(f"PackedCalls indices must be integers, not {type(i).__name__}")
        n = len(self.fidx)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("PackedCalls index out of range")
        return self._spec(i)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self.fidx)):
            yield self._spec(i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (PackedCalls, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # mutable (clear), like a list

    def clear(self) -> None:
        """Drop the calls (the dispatcher holds them now)."""
        self.fids = []
        self.fidx = array("I")
        self.args = b""
        self.offs = array("q", [0])

    def __repr__(self) -> str:
        return f"<PackedCalls {len(self.fidx)} calls, {len(self.fids)} functions, {len(self.args)} args bytes>"


def pack_call_list(entries: list, check_entry: Callable[[int, Any], tuple], spec_type: Callable) -> PackedCalls:
    if type(entries) is not list:
        raise TypeError(f"entries must be a list, got {type(entries).__name__}")
    fids: list = []
    table: dict = {}
    fidx = array("I")
    offs = array("q", [0])
    buf = bytearray()
    for i, entry in enumerate(entries):
        k = None
        if type(entry) is dict and len(entry) == 2:
            fid = entry.get("functionId")
            args = entry.get("args")
            if type(fid) is str and type(args) is list:
                k = table.get(fid)
        if k is None:
            fid, args = check_entry(i, entry)
            k = table.get(fid)
            if k is None:
                k = table[fid] = len(fids)
                fids.append(fid)
        buf += _dumps(args, option=_SORT)
        fidx.append(k)
        offs.append(len(buf))
    return PackedCalls(fids, fidx, bytes(buf), offs, spec_type)
