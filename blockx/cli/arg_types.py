"""argparse ``type=`` functions for the numeric flags: a value out of range is a
usage error argparse reports (exit 2, the flag named) while the command line is
parsed, before a connection is opened or anything is sent."""

from __future__ import annotations

import argparse
import math


def positive_seconds(text: str) -> float:
    """A duration flag: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r}: it must be a number of seconds > 0")
    return value


def non_negative_int(text: str) -> int:
    """A count or a duration in ms, where 0 means "the worker's default"."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be >= 0")
    return value
