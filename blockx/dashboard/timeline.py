"""A task's trace (GetTaskTrace's Chrome trace-event JSON) as the lanes the task
page draws: the worker's phase lane (builder, calls, plugin), one lane per
executor (and its overlap lanes), each a list of spans [start_us, dur_us, cat,
name], plus the instants (retries, executor losses).

The page draws at most ``max_spans`` spans: a trace over that (a 100,000-call
task, already sampled by the worker) keeps every lane's first and last span and
an even sample between, and says how many it left out, so the drawing stays
fast and the Perfetto download still holds everything. Pure."""
from __future__ import annotations

from typing import Any

DEFAULT_MAX_SPANS = 20_000


def lanes_of(trace: dict[str, Any], *, max_spans: int = DEFAULT_MAX_SPANS) -> dict[str, Any]:
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        raise ValueError("the trace has no traceEvents list")
    names: dict[int, str] = {}
    order: dict[int, int] = {}
    spans: dict[int, list[list]] = {}
    instants: list[list] = []
    end_us = 0
    for ev in events:
        if not isinstance(ev, dict):
            continue
        ph, tid = ev.get("ph"), ev.get("tid")
        if not isinstance(tid, int):
            continue
        raw_args = ev.get("args")
        args: dict = raw_args if isinstance(raw_args, dict) else {}
        if ph == "M":
            if ev.get("name") == "thread_name" and isinstance(args.get("name"), str):
                names[tid] = args["name"]
            elif ev.get("name") == "thread_sort_index" and isinstance(args.get("sort_index"), int):
                order[tid] = args["sort_index"]
        elif ph == "X":
            ts, dur = ev.get("ts"), ev.get("dur")
            if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
                continue
            spans.setdefault(tid, []).append([int(ts), max(0, int(dur)), str(ev.get("cat", "")),
                                              str(ev.get("name", ""))])
            end_us = max(end_us, int(ts + dur))
        elif ph == "i":
            ts = ev.get("ts")
            if isinstance(ts, (int, float)):
                instants.append([int(ts), tid, str(ev.get("name", ""))])
                end_us = max(end_us, int(ts))
    total = sum(len(v) for v in spans.values())
    kept_total = 0
    lanes = []
    for tid in sorted(spans, key=lambda t: (order.get(t, t), t)):
        lane = sorted(spans[tid], key=lambda s: s[0])
        share = len(lane) if total <= max_spans else max(2, len(lane) * max_spans // total)
        kept = _even(lane, share)
        kept_total += len(kept)
        lanes.append({"tid": tid, "name": names.get(tid, f"lane {tid}"), "spans": kept, "count": len(lane)})
    if len(instants) > max_spans:
        instants = _even(sorted(instants), max_spans)
    return {"lanes": lanes, "instants": instants, "end_us": end_us, "spans_total": total,
            "spans_drawn": kept_total, "other": trace.get("otherData") if isinstance(trace.get("otherData"), dict)
            else {}}


def _even(items: list, n: int) -> list:
    """``n`` items of ``items`` spread evenly, the first and the last included."""
    if len(items) <= n:
        return items
    if n <= 1:
        return items[:1]
    step = (len(items) - 1) / (n - 1)
    return [items[round(i * step)] for i in range(n)]
