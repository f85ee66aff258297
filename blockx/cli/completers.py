"""Completion markers for the parsers: `files` / `directory` mark an option or
argument as a path, so the completion script `blockx completion` writes (from the
parser itself, blockx.cli.parser) offers files or directories there. Spelled
here so building a parser does not import shtab."""

from __future__ import annotations

import argparse


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
