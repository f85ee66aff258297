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
from typing import TextIO

from blockx.cli.arg_types import non_negative_int, positive_seconds
from blockx.cli.exit import EXIT_OK
from blockx.cli.status_render import render_status, status_to_json


def add_parsers(sub, client: argparse.ArgumentParser) -> None:
    from blockx.cli.help import RAW, epilog

    st = sub.add_parser("status", parents=[client], help="show a worker's status (slots, tasks, executors)",
                        description=("Print GetWorkerStatus of one worker: a table, or JSON with --json. Its call "
                                     "counts (calls ok / failed / retried) are every call the worker ran, "
                                     "subcalls included, while a task's statistic.callCount counts its "
                                     "root calls only."),
                        epilog=epilog("blockx status --worker 127.0.0.1:8081", "blockx status --json --compact"),
                        **RAW)
    st.add_argument("--worker", dest="addr", default=argparse.SUPPRESS, metavar="ADDR",
                    help="worker address host:port (same as --addr)")
    st.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _add_fleet_arguments(st)
    st.set_defaults(func=cmd_status)

    top = sub.add_parser("top", parents=[client], help="show a worker's status live, like top (q quits)",
                         description="Refresh GetWorkerStatus of one worker on the terminal: header, "
                                     "task and call rates, executors. Quit with q or Ctrl-C. Needs rich "
                                     "(pip install 'blockx-worker[cli]').",
                         epilog=epilog("blockx top --worker 127.0.0.1:8081 --interval 2"), **RAW)
    top.add_argument("--worker", dest="addr", default=argparse.SUPPRESS, metavar="ADDR",
                     help="worker address host:port (same as --addr)")
    top.add_argument("--interval", type=positive_seconds, default=1.0, metavar="S",
                     help="seconds between refreshes (default: %(default)s)")
    _add_fleet_arguments(top)
    top.add_argument("--iterations", type=non_negative_int, default=0, metavar="N",
                     help="stop after N refreshes (default: until q / Ctrl-C)")
    top.set_defaults(func=cmd_top_any)


def _add_fleet_arguments(p: argparse.ArgumentParser) -> None:
    """--etcd: every worker registered in etcd, one row each (blockx.cli.fleet_status)."""
    import os

    from blockx.cli.fleet import add_etcd_security

    p.add_argument("--etcd", nargs="?", default=None, const=os.environ.get("BLOCKX_ETCD") or "127.0.0.1:2379",
                   metavar="ENDPOINTS", help="every worker registered in etcd, one row each (GetWorkerStatus of "
                   "each in parallel, bounded by --rpc-timeout; needs an admin --token / $BLOCKX_TOKEN); "
                   "ENDPOINTS defaults to $BLOCKX_ETCD or 127.0.0.1:2379")
    p.add_argument("--etcd-prefix", default="/blockx/workers/", metavar="PREFIX",
                   help="worker registry prefix with --etcd (default: %(default)s)")
    add_etcd_security(p)


# --- the command ---------------------------------------------------------------------------------


def cmd_top_any(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    """`blockx top`: one worker, or with --etcd the fleet (plain text, no rich needed)."""
    if getattr(ns, "etcd", None):
        from blockx.cli.fleet_status import cmd_top_fleet
        return cmd_top_fleet(ns, out)
    from blockx.cli.top import cmd_top
    return cmd_top(ns, out)


def cmd_status(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    from blockx.cli.connection import client_command

    if getattr(ns, "etcd", None):
        from blockx.cli.fleet_status import cmd_status_fleet
        return cmd_status_fleet(ns, out)

    return client_command(_status)(ns, out)


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
