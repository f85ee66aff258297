"""`blockx`: run a Worker (`blockx serve`) or talk to one (submit, watch, result, slot, status, top, trace),
or to the fleet registered in etcd (workers, functions push|list, submit --etcd: blockx.cli.fleet).

This module holds the command tree (every subcommand's parser) and `blockx
completion`, which writes a script from that tree. Each command group lives in a
module of its own: serve (blockx.cli.serve), submit / watch / result / slot
(blockx.cli.submit), the fleet (blockx.cli.fleet), status and top
(blockx.cli.status, blockx.cli.top), trace (blockx.cli.trace); what they share in
blockx.cli.connection (options and session), blockx.cli.output (the JSON),
blockx.cli.task_args (a task from flags), blockx.cli.exit, blockx.cli.help,
blockx.cli.text, blockx.cli.progress and blockx.cli.completers.

Client commands print JSON on stdout: one indented object for submit / result /
slot, one compact object per line for streams (watch, submit --watch). Outputs
and plugin details are JSON on the wire (bytes fields) and are decoded, so the
printout is plain JSON. Exit codes (blockx.cli.exit): 0 ok, 1 the worker
refused or could not be reached ("error: CODE: message" on stderr), 2 bad usage
or configuration (nothing was sent), 3 a task reached FAILED, 130 interrupted."""

from __future__ import annotations

import argparse
import os
import sys

from typing import TextIO

from blockx import __version__
from blockx.app.profile_names import PROFILE_NAMES
from blockx.cli.call_grammar import GRAMMAR_HELP as CALLS_GRAMMAR, calls_arg
from blockx.cli.completers import files
from blockx.cli.arg_types import non_negative_int, positive_seconds
from blockx.cli.connection import add_connect_timeout_argument, add_tls_arguments
from blockx.cli.exit import EXIT_OK
from blockx.cli.help import EXIT_CODES, RAW, epilog
from blockx.cli.output import COUNTS_HELP, add_output_arguments
from blockx.cli.serve import cmd_serve
from blockx.cli.submit import cmd_result, cmd_slot, cmd_submit, cmd_watch
from blockx.cli.task_args import POLICIES

DEFAULT_ADDR = "127.0.0.1:8081"
DEFAULT_RPC_TIMEOUT_S = 10.0
SHELLS = ("bash", "zsh", "tcsh")


# --- parser ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="blockx", description="BlockX Worker: serve, or talk to a running worker.",
                                epilog="Every command has its own --help with examples. Client commands print "
                                       "JSON on stdout.\nShell completion: blockx completion bash|zsh|tcsh.\n\n"
                                       + EXIT_CODES, **RAW)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                   help="print the version and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    s = sub.add_parser("serve", help="run a Worker", description=(
        "Run a Worker until SIGTERM / SIGINT (then drain). Configuration: defaults -> profile -> "
        "WORKER_CONFIG JSON file (or --config) -> environment variables. Needs the worker extra "
        "(pip install 'blockx-worker[worker]')."), epilog=epilog(
        "blockx serve --profile dev",
        "blockx serve --config worker.json --print-config"), **RAW)
    s.add_argument("--profile", choices=PROFILE_NAMES, default=os.environ.get("BLOCKX_PROFILE", "block"),
                   help="deployment profile: block, bundle, or dev (block plus the dev stubs, the example "
                        "functions and the devstub IO backend) "
                        "(default: $BLOCKX_PROFILE or block)")
    files(s.add_argument("--config", metavar="FILE", default=None,
                         help="JSON configuration file (takes the place of $WORKER_CONFIG)"))
    s.add_argument("--print-config", action="store_true",
                   help="print the effective configuration as JSON and exit (2 if it is invalid)")
    s.set_defaults(func=cmd_serve)

    client = argparse.ArgumentParser(add_help=False)
    client.add_argument("--addr", default=os.environ.get("BLOCKX_ADDR", DEFAULT_ADDR),
                        help=f"worker address host:port (default: $BLOCKX_ADDR or {DEFAULT_ADDR})")
    client.add_argument("--rpc-timeout", type=positive_seconds, default=DEFAULT_RPC_TIMEOUT_S, metavar="SECONDS",
                        help="deadline of each unary RPC (default: %(default)s)")
    add_connect_timeout_argument(client)
    client.add_argument("--compact", action="store_true", help="print single-line JSON")
    add_tls_arguments(client)

    sm = sub.add_parser("submit", parents=[client], help="submit a task", description=(
        "Submit a task and wait for its result. Build it from flags (--calls / --payload)\n"
        "or from --task-json; explicit flags override fields of the JSON task.\n\n"
        "--calls FN:ARGS, " + CALLS_GRAMMAR + "\n"
        "A call outside this grammar exits 2, naming its column; nothing is sent.\n\n"
        "A failed task's remote traceback follows on stderr; a result taller than the terminal\n"
        "is summarized (--json for all). " + COUNTS_HELP + "."), epilog=epilog(
        "blockx submit --calls add:1,2 --calls add1:41",
        "blockx submit --calls sleep_ms:300 --no-wait --task-id t1",
        "blockx submit --task-json task.json --task-id t2 --policy continue",
        "blockx submit --etcd 127.0.0.1:2379 --calls square:7 --watch"), **RAW)
    sm.add_argument("--task-id", default=None, help="task id (default: a new UUID)")
    sm.add_argument("--builder", default=None, help="call builder name (default: callList)")
    sm.add_argument("--calls", action="append", default=None, metavar="FN:ARGS", type=calls_arg,
                    help="a callList call, e.g. 'add:1,2' or 'echo:{\"k\":1}' (repeatable; the grammar is above)")
    sm.add_argument("--payload", default=None, metavar="JSON|@FILE", help="builder payload (JSON)")
    sm.add_argument("--result-handler", default=None, metavar="PLUGIN", help="the task's plugin, e.g. log or test")
    sm.add_argument("--result-config", default=None, metavar="JSON|@FILE", help="the plugin's config (JSON)")
    sm.add_argument("--timeout-ms", type=non_negative_int, default=None,
                    help="task timeout (0: the worker's default)")
    sm.add_argument("--policy", default=None, choices=tuple(POLICIES),
                    help="call failure policy: fast-fail (a call that fails for good, retries spent, stops "
                         "the task's other calls), continue (every call runs), or unspecified (the "
                         "worker's default)")
    sm.add_argument("--max-attempts", type=non_negative_int, default=None, help="call retry: max attempts")
    sm.add_argument("--base-backoff-ms", type=non_negative_int, default=None, help="call retry: base backoff")
    sm.add_argument("--jitter-percent", type=non_negative_int, default=None,
                    help="call retry: jitter percent (0..5)")
    sm.add_argument("--instance-id", default=None, help="fairness key")
    files(sm.add_argument("--task-json", default=None, metavar="FILE|-", help="the task as JSON (- for stdin)"))
    where = sm.add_mutually_exclusive_group()      # a slot is one worker's: it cannot go with --etcd
    where.add_argument("--slot", default=None, metavar="SLOT_ID", help="slot id from a prior `blockx slot`")
    where.add_argument("--etcd", nargs="?", default=None, const=os.environ.get("BLOCKX_ETCD") or "127.0.0.1:2379",
                    metavar="ENDPOINTS", help="place the task on a worker registered in etcd (blockx.client.Cluster) "
                    "instead of --addr; ENDPOINTS defaults to $BLOCKX_ETCD or 127.0.0.1:2379")
    sm.add_argument("--etcd-prefix", default="/blockx/workers/", metavar="PREFIX",
                    help="worker registry prefix with --etcd (default: %(default)s)")
    from blockx.cli.fleet import add_etcd_security
    add_etcd_security(sm)
    mode = sm.add_mutually_exclusive_group()
    mode.add_argument("--watch", action="store_true", help="print every TaskUpdate until terminal")
    mode.add_argument("--no-wait", action="store_true", help="print the SubmitTask response and exit")
    add_output_arguments(sm)
    sm.set_defaults(func=cmd_submit)

    w = sub.add_parser("watch", parents=[client], help="stream task updates until terminal", description=(
        "Print each task's current state, then every change (progress included), one JSON object per "
        "line, until every task is terminal; on a terminal, progress bars while they run."),
        epilog=epilog("blockx watch t1 t2 --addr 127.0.0.1:8081"), **RAW)
    w.add_argument("task_ids", nargs="+", metavar="TASK_ID")
    w.set_defaults(func=cmd_watch)

    r = sub.add_parser("result", parents=[client], help="get a task's state and result", description=(
        "Print a task's current state, with its result (outputs, plugin results, statistic) once it "
        "is terminal: every output, fetched page by page. A task is kept for resultRetentionMs after it ends. "
        "A failed task's remote traceback follows on stderr; a result taller than the terminal is "
        "summarized (--json for all). " + COUNTS_HELP + "."),
        epilog=epilog("blockx result t1 --compact"), **RAW)
    r.add_argument("task_id", metavar="TASK_ID")
    add_output_arguments(r)
    r.set_defaults(func=cmd_result)

    sl = sub.add_parser("slot", parents=[client], help="reserve a task slot", description=(
        "Reserve a slot for TASK_ID (idempotent by task id) and print it; then submit the task "
        "with --slot SLOT_ID before the reservation's TTL runs out."), epilog=epilog(
        "blockx slot t1 --ttl-ms 5000",
        "blockx submit --task-id t1 --slot SLOT_ID --calls add:1,2"), **RAW)
    sl.add_argument("task_id", metavar="TASK_ID")
    sl.add_argument("--ttl-ms", type=non_negative_int, default=0, help="reservation TTL (0: the worker's default)")
    sl.set_defaults(func=cmd_slot)

    from blockx.cli.fleet import add_parsers as add_fleet_parsers
    add_fleet_parsers(sub, client)
    from blockx.cli.status import add_parsers as add_status_parsers
    add_status_parsers(sub, client)

    from blockx.cli.trace import add_parser as add_trace_parser
    add_trace_parser(sub, client)
    from blockx.cli.tasks import add_parsers as add_task_parsers    # cancel, tasks, health
    add_task_parsers(sub, client)
    from blockx.cli.dashboard import add_parser as add_dashboard_parser    # the fleet in a browser
    add_dashboard_parser(sub)
    add_completion_parser(sub)
    return p


# --- completion --------------------------------------------------------------------------

COMPLETION_HELP = """`blockx completion bash|zsh|tcsh`: a shell completion script for every
subcommand and option, written by shtab from the parser itself.

The script is static: the shell completes from it without running `blockx` (nor
Python) on each TAB, and it needs no hook at run time. Install it once, e.g.
`blockx completion bash > ~/.local/share/bash-completion/completions/blockx`, or
`blockx completion zsh > "${fpath[1]}/_blockx"`. Options that take a file or a
directory complete paths (blockx.cli.completers marks them in the parsers)."""


def add_completion_parser(sub) -> None:
    c = sub.add_parser("completion", help="print a shell completion script (bash, zsh, tcsh)",
                       description=COMPLETION_HELP, epilog=epilog(
                           "blockx completion bash > ~/.local/share/bash-completion/completions/blockx",
                           "blockx completion zsh > ~/.zfunc/_blockx"), **RAW)
    c.add_argument("shell", choices=SHELLS, help="the shell to complete for")
    c.set_defaults(func=cmd_completion)


def cmd_completion(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    import shtab

    out = out or sys.stdout
    out.write(shtab.complete(build_parser(), shell=ns.shell))
    out.flush()
    return EXIT_OK
