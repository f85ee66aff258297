"""`blockx`: the command line. `main` is the console entry point (`blockx` and
`python -m blockx`); the command tree is built in blockx.cli.parser, each command
group in a module of its own. The public names of the parts are re-exported here."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from blockx.cli.exit import (EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_TASK_FAILED, EXIT_USAGE, CLIError,
                             UsageError)
from blockx.cli.output import decode_json_bytes, response_to_json, result_to_json, state_name
from blockx.cli.parser import DEFAULT_ADDR, DEFAULT_RPC_TIMEOUT_S, build_parser
from blockx.cli.serve import cmd_serve
from blockx.cli.submit import cmd_result, cmd_slot, cmd_submit, cmd_watch
from blockx.cli.task_args import parse_call, task_from_args, task_from_json

__all__ = [
    "DEFAULT_ADDR", "DEFAULT_RPC_TIMEOUT_S", "EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_TASK_FAILED",
    "EXIT_USAGE", "CLIError", "UsageError", "build_parser", "cmd_result", "cmd_serve", "cmd_slot", "cmd_submit",
    "cmd_watch", "decode_json_bytes", "main", "parse_call", "response_to_json", "result_to_json", "state_name",
    "task_from_args", "task_from_json",
]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        return ns.func(ns)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except CLIError as exc:
        from blockx.cli.text import term_safe   # may quote a worker's or etcd's message
        print(f"error: {term_safe(exc, keep_newlines=True)}", file=sys.stderr)
        return exc.exit_code                    # 2 for a UsageError: the command line is wrong
    except BrokenPipeError:
        return EXIT_ERROR
