"""Checks of a Chrome trace-event document that any trace viewer relies on
(shared by the unit tests of the export and the end-to-end trace tests)."""
from __future__ import annotations

import json


def validate(doc: dict) -> tuple[list, dict]:
    """Assert the structure; return (the X events, tid -> lane name)."""
    json.loads(json.dumps(doc))                               # plain JSON
    evs = doc["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    assert any(e["ph"] == "M" and e["name"] == "process_name" for e in evs)
    xs = [e for e in evs if e["ph"] == "X"]
    for e in xs:
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)), e
        assert e["ts"] >= 0 and e["dur"] >= 0, e
        assert e["tid"] in names, f"lane {e['tid']} has no name"
        assert e["pid"] == 1 and e["name"]
    for e in evs:
        assert e["ph"] in ("X", "M", "i", "s", "f"), e
        if e["ph"] in ("i", "s", "f"):
            assert e["tid"] in names and isinstance(e["ts"], (int, float)), e
    by_tid: dict[int, list] = {}
    for e in xs:
        by_tid.setdefault(e["tid"], []).append(e)
    for tid, spans in by_tid.items():                          # spans on one lane nest or are disjoint
        spans = sorted(spans, key=lambda e: (e["ts"], -e["dur"]))
        open_ends: list = []
        for e in spans:
            while open_ends and open_ends[-1] <= e["ts"]:
                open_ends.pop()
            end = e["ts"] + e["dur"]
            assert not open_ends or end <= open_ends[-1], f"lane {names[tid]}: {e} overlaps its neighbour"
            open_ends.append(end)
    return xs, names


def inside(child: dict, parent: dict) -> bool:
    """``child`` lies within ``parent``'s span on the same lane."""
    return (child["tid"] == parent["tid"] and parent["ts"] <= child["ts"]
            and child["ts"] + child["dur"] <= parent["ts"] + parent["dur"])
