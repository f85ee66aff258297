"""`blockx trace TASK_ID [--worker ADDR] [-o FILE]`: a task's trace in the Chrome trace-event format.

The JSON goes to stdout (or FILE): `blockx trace t1 > trace.json`, then open it in
https://ui.perfetto.dev or chrome://tracing. One summary line goes to stderr
(events, complete, sampled), so the redirected file holds the JSON only. The
Worker keeps a task's trace while it runs and for resultRetentionMs after."""
from __future__ import annotations

import argparse
import sys
from typing import TextIO

from blockx.cli.connection import client_command
from blockx.cli.exit import EXIT_OK, CLIError
from blockx.cli.text import term_safe


def add_parser(sub, client: argparse.ArgumentParser) -> None:
    from blockx.cli.completers import files
    from blockx.cli.help import RAW, epilog

    t = sub.add_parser("trace", parents=[client], help="write a task's trace (Chrome trace-event JSON)",
                       description=__doc__, epilog=epilog("blockx trace t1 -o trace.json",
                                                          "blockx trace t1 --worker 127.0.0.1:8081 > trace.json"),
                       **RAW)
    t.add_argument("task_id", metavar="TASK_ID")
    t.add_argument("--worker", dest="addr", metavar="ADDR", default=argparse.SUPPRESS, help="the worker that ran the task (same as --addr)")
    files(t.add_argument("-o", "--output", metavar="FILE", default=None,
                         help="write the JSON to FILE instead of stdout"))
    t.set_defaults(func=cmd_trace)


@client_command
def _trace(ns: argparse.Namespace, client, out: TextIO) -> int:
    tr = client.trace(ns.task_id, timeout_s=ns.rpc_timeout)
    if ns.output:
        try:
            tr.write(ns.output)
        except OSError as exc:
            raise CLIError(f"--output {ns.output!r}: {exc.strerror or exc}") from None
    else:
        out.write(tr.chrome_trace_json.decode())
        out.write("\n")
        out.flush()
    notes = [term_safe(tr.state), "complete" if tr.complete else "still running",
             f"sampled: about 1 call in {tr.sample_every} kept" if tr.sampled else "",
             f"{tr.events_dropped} events dropped" if tr.events_dropped else ""]
    print(f"trace of task {term_safe(tr.task_id)}: {tr.events_recorded} events ({', '.join(n for n in notes if n)})",
          file=sys.stderr)
    return EXIT_OK


def cmd_trace(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    return _trace(ns, out)
