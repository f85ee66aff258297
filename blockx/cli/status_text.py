"""`blockx status` as plain text, for a client install without the `cli` extra
(rich): the same header lines and executor columns as the rich table, laid out
with spaces."""

from __future__ import annotations

from blockx.cli.status_render import fmt_bytes, header_lines

COLUMNS = ("EXECUTOR", "STATE", "PID", "INFL", "RUN", "RSS", "CPU u/s", "RST", "HB AGE")


def status_text(st) -> str:
    c = st.counters
    lines = header_lines(st)
    lines.append(f"totals: tasks {c.tasks_submitted} submitted, {c.tasks_succeeded} succeeded, "
                 f"{c.tasks_failed} failed; calls {c.calls_completed} ok, {c.calls_failed} failed, "
                 f"{c.calls_retried} retried")
    rows = [COLUMNS]
    for e in st.executors:
        age = f"{e.last_heartbeat_age_ms}ms" if e.last_heartbeat_age_ms >= 0 else "-"
        rows.append((e.executor_id, e.state if e.healthy else f"{e.state}!", str(e.pid or "-"), str(e.inflight),
                     str(e.runnable), fmt_bytes(e.rss_bytes) if e.rss_bytes else "-",
                     f"{e.cpu_user_seconds:.1f}/{e.cpu_system_seconds:.1f}", str(e.restarts), age))
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines.append("")
    for r in rows:
        cells = [r[i].ljust(widths[i]) if i < 2 else r[i].rjust(widths[i]) for i in range(len(COLUMNS))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"
