"""Failure messages that say a thing twice.

A failure message is read by a person: each layer that reports it may add what
it knows (the call, the subcall, the kind), but never what the layer below
already said. ``doubled_prefix(message)`` names the first repetition it finds,
or returns None:

- the same segment twice in a row (segments are what ": " separates, compared
  without case and quotes): "callList: callList: calls[0].args is missing";
- the same subcall named twice with only kinds between, the second saying no
  more than the first (the same id, or one of them without): "subcall 'quota'
  failed: SUBCALL_FAILED: subcall quota (t/0/sub-9) failed: QUOTA: ...". A
  subcall of the same function one level deeper has another id and is not a
  repetition (a recursive function's chain).
"""
from __future__ import annotations

import re

_KIND = re.compile(r"^[A-Z][A-Z0-9_]*$")
_NAMED = re.compile(r"^(sub)?call (\S+?)(?: \(([^)]*)\))? failed\b")


def _norm(segment: str) -> str:
    return segment.strip().strip("'\"").replace("'", "").replace('"', "").lower()


def doubled_prefix(message: str) -> str | None:
    segs = [s for s in message.split(": ")]
    norm = [_norm(s) for s in segs]
    for a, b in zip(norm, norm[1:]):
        if a and a == b:
            return f"{a!r} twice in a row"
    last: tuple[str, str] | None = None          # (function, id) of the latest named subcall
    for raw, n in zip(segs, norm):
        m = _NAMED.match(n)
        if m:
            fn, cid = m.group(2), m.group(3) or ""
            if last is not None and last[0] == fn and (not cid or not last[1] or cid == last[1]):
                return f"subcall {fn} named twice"
            last = (fn, cid)
        elif not _KIND.match(raw.strip()):
            last = None
    return None
