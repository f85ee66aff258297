"""`blockx status`: one Worker's GetWorkerStatus, as a table or as JSON.

`blockx status [--worker ADDR] [--json]` prints a header (worker, version,
uptime, ready / draining, etcd registration, code epoch, slots, tasks by phase,
outbox depth, cumulative counters) and one row per executor (state, pid,
in-flight, runnable, RSS, CPU user / system seconds, restarts, last heartbeat
age). `--json` prints the same as one JSON object (int64 fields as numbers).
`blockx top` (blockx.cli.top) shows it live. Exit codes as the other client
commands (blockx.cli.exit)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from blockx.cli.exit import EXIT_OK
from blockx.cli.text import term_safe

PHASES = ("PREPARING", "BUILDER", "CALLS", "PLUGIN")


def add_parsers(sub, client: argparse.ArgumentParser) -> None:
    from blockx.cli.help import RAW, epilog

    st = sub.add_parser("status", parents=[client], help="show a worker's status (slots, tasks, executors)",
                        description="Print GetWorkerStatus of one worker: a table, or JSON with --json.",
                        epilog=epilog("blockx status --worker 127.0.0.1:8081", "blockx status --json --compact"),
                        **RAW)
    st.add_argument("--worker", dest="addr", default=argparse.SUPPRESS, metavar="ADDR",
                    help="worker address host:port (same as --addr)")
    st.add_argument("--json", action="store_true", help="print JSON instead of a table")
    st.set_defaults(func=cmd_status)

    top = sub.add_parser("top", parents=[client], help="show a worker's status live, like top (q quits)",
                         description="Refresh GetWorkerStatus of one worker on the terminal: header, "
                                     "task and call rates, executors. Quit with q or Ctrl-C. Needs rich "
                                     "(pip install 'blockx-worker[cli]').",
                         epilog=epilog("blockx top --worker 127.0.0.1:8081 --interval 2"), **RAW)
    top.add_argument("--worker", dest="addr", default=argparse.SUPPRESS, metavar="ADDR",
                     help="worker address host:port (same as --addr)")
    top.add_argument("--interval", type=float, default=1.0, metavar="S",
                     help="seconds between refreshes (default: %(default)s)")
    from blockx.cli.top import cmd_top
    top.set_defaults(func=cmd_top)


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


def fmt_bytes(n: int) -> str:
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
        t.add_column(name, justify=justify, no_wrap=True)
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


# --- the command ---------------------------------------------------------------------------------


def cmd_status(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    from blockx.cli.submit import _client_command

    return _client_command(_status)(ns, out)


def _status(ns: argparse.Namespace, client, out: TextIO) -> int:
    st = client.status(timeout_s=ns.rpc_timeout)
    if ns.json:
        out.write(json.dumps(status_to_json(st), indent=None if ns.compact else 2) + "\n")
        out.flush()
        return EXIT_OK
    from blockx.extras import has

    if not has("cli"):        # a client install without rich: the same, as plain text
        from blockx.cli.status_text import status_text

        out.write(status_text(st))
        out.flush()
        return EXIT_OK
    from rich.console import Console

    Console(file=out, width=max(80, _width(out)), highlight=False).print(render_status(st))
    return EXIT_OK


def _width(out: TextIO) -> int:
    import shutil

    if out is sys.stdout and out.isatty():
        return shutil.get_terminal_size((80, 24)).columns
    return 100
