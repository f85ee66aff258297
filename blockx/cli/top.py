"""`blockx top`: one Worker's status, live on the terminal, like top.

Every --interval seconds it reads GetWorkerStatus and redraws the screen (rich
Live, alternate screen) on a terminal; into a pipe or a file it prints each
refresh as a frame of its own, one after the other (a blank line between), as
`top -b` does. Each frame: the header of `blockx status`, the rates of tasks and
calls per second computed from the deltas of the Worker's cumulative counters
between two reads (``Rates``), and the executors table. It fits a plain 80x24
terminal. `q` quits (exit 0), and so does Ctrl-C. When stdin is not a terminal
only Ctrl-C (or SIGTERM) ends it. A failed read shows the error in place and
the next refresh tries again. Every string the worker sends is shown escaped
(blockx.cli.text): a control sequence in an executor id or an error message
cannot move the cursor or repaint the screen."""

from __future__ import annotations

import argparse
import os
import select
import sys
import time
from dataclasses import dataclass
from typing import TextIO

from blockx.cli.exit import EXIT_OK, UsageError
from blockx.cli.text import term_safe


@dataclass(frozen=True, slots=True)
class Rates:
    """Per-second rates between two WorkerStatus reads (None until two reads)."""
    tasks_submitted: float
    tasks_finished: float
    tasks_failed: float
    calls: float
    calls_failed: float
    calls_retried: float

    @classmethod
    def between(cls, prev, cur) -> "Rates | None":
        if prev is None:
            return None
        dt = (cur.now_ms - prev.now_ms) / 1000.0
        if dt <= 0:
            return None
        a, b = prev.counters, cur.counters

        def rate(x: int, y: int) -> float:
            return max(0, y - x) / dt

        return cls(
            tasks_submitted=rate(a.tasks_submitted, b.tasks_submitted),
            tasks_finished=rate(a.tasks_succeeded + a.tasks_failed, b.tasks_succeeded + b.tasks_failed),
            tasks_failed=rate(a.tasks_failed, b.tasks_failed),
            calls=rate(a.calls_completed + a.calls_failed, b.calls_completed + b.calls_failed),
            calls_failed=rate(a.calls_failed, b.calls_failed),
            calls_retried=rate(a.calls_retried, b.calls_retried))


def rates_lines(r: Rates | None) -> list[str]:
    if r is None:
        return ["tasks/s: (measuring...)", "calls/s: (measuring...)"]
    return [f"tasks/s: {r.tasks_submitted:.1f} submitted, {r.tasks_finished:.1f} finished, "
            f"{r.tasks_failed:.1f} failed",
            f"calls/s: {r.calls:.1f} finished, {r.calls_failed:.1f} failed, {r.calls_retried:.1f} retried"]


def render_top(st, rates: Rates | None, *, error: str = "", interval: float = 1.0, keys: bool = True):
    from rich.console import Group
    from rich.text import Text

    from blockx.cli.status_render import executors_table, header_lines

    parts = [Text(line) for line in header_lines(st)] if st is not None else [Text("worker: (no status yet)")]
    parts.extend(Text(line) for line in rates_lines(rates))
    if error:
        parts.append(Text(f"error: {term_safe(error)}", style="red"))
    parts.append(Text(""))
    if st is not None:
        parts.append(executors_table(st))
    parts.append(Text(""))
    parts.append(Text(f"q quit   refresh {interval:g}s" if keys else f"refresh {interval:g}s", style="dim"))
    return Group(*parts)


class KeyReader:
    """Single keys from a terminal stdin (cbreak mode, restored on exit)."""

    def __init__(self, stream) -> None:
        self._fd = None
        self._saved = None
        try:
            if stream.isatty():
                import termios
                import tty

                self._fd = stream.fileno()
                self._saved = termios.tcgetattr(self._fd)
                tty.setcbreak(self._fd)
        except (OSError, ValueError, AttributeError):
            self._fd = None

    @property
    def active(self) -> bool:
        """Keys are read (stdin is a terminal): `q` quits."""
        return self._fd is not None

    def wait(self, timeout: float) -> str:
        """A key pressed within timeout seconds, else ""."""
        if self._fd is None:
            time.sleep(timeout)
            return ""
        ready, _, _ = select.select([self._fd], [], [], max(0.0, timeout))
        if not ready:
            return ""
        return os.read(self._fd, 1).decode(errors="replace")

    def restore(self) -> None:
        if self._fd is not None and self._saved is not None:
            import termios

            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)


def cmd_top(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    if ns.interval <= 0:
        raise UsageError("--interval must be > 0")
    from blockx.extras import MissingExtra, require

    try:
        require("cli", "`blockx top`")
    except MissingExtra as exc:                  # configuration: exit 2, as `blockx serve` without its extra
        raise UsageError(str(exc)) from None
    from blockx.cli.connection import client_command

    return client_command(_top)(ns, out)


def _top(ns: argparse.Namespace, client, out: TextIO) -> int:
    from rich.console import Console

    console = Console(file=out, highlight=False)
    keys = KeyReader(sys.stdin)
    try:
        if console.is_terminal:
            return _top_live(ns, client, console, keys)
        return _top_frames(ns, client, console, keys)
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        keys.restore()


def _frames(ns: argparse.Namespace, client, keys: KeyReader):
    """(status, rates, error) once per refresh until --iterations or q."""
    from blockx.client import BlockxError

    prev = cur = None
    refreshes = 0
    while True:
        started = time.monotonic()
        refreshes += 1
        error = ""
        try:
            st = client.status(timeout_s=max(ns.rpc_timeout, ns.interval))
            prev, cur = cur, st
        except BlockxError as exc:
            error = f"{exc.code.name}: {exc.message}"
        yield render_top(cur, Rates.between(prev, cur) if cur is not None else None,
                         error=error, interval=ns.interval, keys=keys.active)
        if ns.iterations and refreshes >= ns.iterations:
            return
        key = keys.wait(ns.interval - (time.monotonic() - started))
        if key in ("q", "Q"):
            return


def _top_live(ns: argparse.Namespace, client, console, keys: KeyReader) -> int:
    from rich.live import Live

    with Live(console=console, screen=True, auto_refresh=False, transient=False) as live:
        for frame in _frames(ns, client, keys):
            live.update(frame, refresh=True)
    return EXIT_OK


def _top_frames(ns: argparse.Namespace, client, console, keys: KeyReader) -> int:
    """Not a terminal: rich Live would only print the last frame, when it stops.
    Each frame is printed whole and flushed as it comes, for `| cat`, a log file
    or `| grep` to follow."""
    for n, frame in enumerate(_frames(ns, client, keys)):
        if n:
            console.print()
        console.print(frame)
        console.file.flush()
    return EXIT_OK
