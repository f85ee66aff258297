"""How `blockx status` and `blockx top` show a GetWorkerStatus: as JSON (int64
fields as numbers), as header lines, and as rich tables (executors_table,
render_status). Only the drawing: the commands are blockx.cli.status and
blockx.cli.top, the plain-text layout without rich blockx.cli.status_text."""

from __future__ import annotations

from typing import Any, cast

from blockx.cli.text import term_safe

PHASES = ("PREPARING", "BUILDER", "CALLS", "PLUGIN")


# --- JSON -------------------------------------------------------------------------------------


def status_to_json(st) -> dict[str, Any]:
    c = st.counters
    return {
        "workerAddr": st.worker_addr, "version": st.version, "nowMs": st.now_ms,
        "startedAtMs": st.started_at_ms, "uptimeMs": st.uptime_ms, "ready": st.ready,
        "draining": st.draining,
        "slots": {"total": st.slots.total, "free": st.slots.free, "reserved": st.slots.reserved,
                  "running": st.slots.running},
        "tasksByPhase": {p: st.tasks_by_phase.get(p, 0) for p in PHASES},
        "executors": [{
            "executorId": e.executor_id, "pid": e.pid, "state": e.state, "healthy": e.healthy,
            "inflight": e.inflight, "runnable": e.runnable, "capacity": e.capacity, "rssBytes": e.rss_bytes,
            "cpuUserSeconds": round(e.cpu_user_seconds, 3), "cpuSystemSeconds": round(e.cpu_system_seconds, 3),
            "restarts": e.restarts, "kills": e.kills, "lastHeartbeatAgeMs": e.last_heartbeat_age_ms,
        } for e in st.executors],
        "outboxDepth": st.outbox_depth, "codeEpoch": st.code_epoch, "etcdState": st.etcd_state,
        "counters": {
            "tasksSubmitted": c.tasks_submitted, "tasksSucceeded": c.tasks_succeeded,
            "tasksFailed": c.tasks_failed, "tasksFailedByCode": dict(sorted(c.tasks_failed_by_code.items())),
            "callsDispatched": c.calls_dispatched, "callsCompleted": c.calls_completed,
            "callsFailed": c.calls_failed, "callsRetried": c.calls_retried,
            "executorRestarts": c.executor_restarts, "executorWedgeKills": c.executor_wedge_kills,
            "executorHeartbeatTimeouts": c.executor_heartbeat_timeouts,
        },
    }


# --- human rendering (shared with `blockx top`) ------------------------------------------------


def fmt_duration(ms: int) -> str:
    s = max(0, int(ms // 1000))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d{h:02d}h{m:02d}m"
    if h:
        return f"{h}h{m:02d}m{s:02d}s"
    return f"{m}m{s:02d}s"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "K", "M", "G", "T"):
        if abs(n) < 1024 or unit == "T":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)


def header_lines(st) -> list[str]:
    """A few short lines (each under 80 columns) about the worker as a whole; the
    strings the worker sent are escaped for the terminal (blockx.cli.text)."""
    sl = st.slots
    phases = " ".join(f"{p.lower()} {st.tasks_by_phase.get(p, 0)}" for p in PHASES)
    flags = ("ready" if st.ready else "NOT READY") + (" DRAINING" if st.draining else "")
    return [
        f"worker {term_safe(st.worker_addr or '?')}  v{term_safe(st.version)}  up {fmt_duration(st.uptime_ms)}  "
        f"{flags}",
        f"slots {sl.running} running, {sl.reserved} reserved, {sl.free} free of {sl.total}  "
        f"etcd {term_safe(st.etcd_state)}  epoch {st.code_epoch}",
        f"tasks: {phases}  outbox {st.outbox_depth}",
    ]


def executors_table(st, *, title: str | None = None):
    # Cells are Text, never markup: an executor id or state is shown as sent.
    from rich.table import Table
    from rich.text import Text

    t = Table(title=title, box=None, pad_edge=False, header_style="bold", show_edge=False)
    for name, justify in (("EXECUTOR", "left"), ("STATE", "left"), ("PID", "right"), ("INFL", "right"),
                          ("RUN", "right"), ("RSS", "right"), ("CPU u/s", "right"), ("RST", "right"),
                          ("HB AGE", "right")):
        t.add_column(name, justify=cast(Any, justify), no_wrap=True)
    for e in st.executors:
        age = f"{e.last_heartbeat_age_ms}ms" if e.last_heartbeat_age_ms >= 0 else "-"
        t.add_row(Text(term_safe(e.executor_id)), Text(term_safe(e.state), style="" if e.healthy else "red"),
                  str(e.pid or "-"),
                  str(e.inflight), str(e.runnable), fmt_bytes(e.rss_bytes) if e.rss_bytes else "-",
                  f"{e.cpu_user_seconds:.1f}/{e.cpu_system_seconds:.1f}", str(e.restarts), age)
    return t


def render_status(st):
    from rich.console import Group
    from rich.text import Text

    c = st.counters
    lines = header_lines(st)
    lines.append(f"totals: tasks {c.tasks_submitted} submitted, {c.tasks_succeeded} succeeded, "
                 f"{c.tasks_failed} failed; calls {c.calls_completed} ok, {c.calls_failed} failed, "
                 f"{c.calls_retried} retried")
    return Group(*(Text(line) for line in lines), Text(""), executors_table(st))
