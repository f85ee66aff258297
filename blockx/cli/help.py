"""The parts every `blockx` subcommand's --help shares: its examples and the exit
codes (blockx.cli.exit), laid out as written (RawDescriptionHelpFormatter).
Each example is a whole command line; a unit test parses every one with the real
parser, so none can go stale."""

from __future__ import annotations

import argparse
from typing import Any

EXIT_CODES = """exit codes:
  0    ok
  1    the worker refused, or could not be reached ("error: CODE: message" on stderr)
  2    bad usage or configuration: a flag, or input it names (--calls, --payload, a file);
       nothing was sent
  3    a task reached FAILED
  130  interrupted"""

# add_parser(..., **RAW): descriptions and epilogs keep their line breaks.
RAW: dict[str, Any] = {"formatter_class": argparse.RawDescriptionHelpFormatter}


def epilog(*examples: str, codes: str = EXIT_CODES) -> str:
    """``examples:`` and one indented command line each, then the exit codes
    (``codes``: a command whose exit codes differ, like `blockx health`, names its own)."""
    lines = ["example:" if len(examples) == 1 else "examples:"]
    lines += [f"  {e}" for e in examples]
    return "\n".join(lines) + "\n\n" + codes


def examples_of(parser: argparse.ArgumentParser) -> list[str]:
    """The example command lines in ``parser``'s epilog."""
    out, inside = [], False
    for line in (parser.epilog or "").splitlines():
        if line in ("example:", "examples:"):
            inside = True
        elif inside and line.startswith("  "):
            out.append(line.strip())
        else:
            inside = False
    return out
