"""`blockx completion bash|zsh|tcsh`: a shell completion script for every
subcommand and option, written by shtab from the parser itself.

The script is static: the shell completes from it without running `blockx` (nor
Python) on each TAB, and it needs no hook at run time. Install it once, e.g.
`blockx completion bash > ~/.local/share/bash-completion/completions/blockx`, or
`blockx completion zsh > "${fpath[1]}/_blockx"`. Options that take a file or a
directory complete paths (``files`` / ``directory`` mark them in the parsers)."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from blockx.cli.exit import EXIT_OK
from blockx.cli.help import RAW, epilog

SHELLS = ("bash", "zsh", "tcsh")
# What shtab reads from an action's `complete` attribute (shtab.FILE / DIRECTORY),
# spelled here so building the parser does not import shtab.
_FILE = {"bash": "_shtab_compgen_files", "zsh": "_files", "tcsh": "f"}
_DIRECTORY = {"bash": "_shtab_compgen_dirs", "zsh": "_files -/", "tcsh": "d"}


def files(action: argparse.Action) -> argparse.Action:
    """Mark an option or argument as a path: the completion offers files."""
    action.complete = _FILE  # type: ignore[attr-defined]
    return action


def directory(action: argparse.Action) -> argparse.Action:
    action.complete = _DIRECTORY  # type: ignore[attr-defined]
    return action


def add_parser(sub) -> None:
    c = sub.add_parser("completion", help="print a shell completion script (bash, zsh, tcsh)",
                       description=__doc__, epilog=epilog(
                           "blockx completion bash > ~/.local/share/bash-completion/completions/blockx",
                           "blockx completion zsh > ~/.zfunc/_blockx"), **RAW)
    c.add_argument("shell", choices=SHELLS, help="the shell to complete for")
    c.set_defaults(func=cmd_completion)


def cmd_completion(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    import shtab

    from blockx.cli import build_parser

    out = out or sys.stdout
    out.write(shtab.complete(build_parser(), shell=ns.shell))
    out.flush()
    return EXIT_OK
