"""The progress bar of `blockx submit` and `blockx watch` on a terminal.

One bar per watched task (rich.progress), fed with each TaskUpdate's
TaskProgress: done of total root calls, failed and retried beside it; a
streaming task whose total is not known yet shows a pulsing bar. The bars are
drawn on the terminal only while the tasks run (transient); the commands then
print the terminal updates as JSON as they always do. When stdout is not a
terminal the commands print every update as a JSON line instead (with its
"progress" object) and this module is not used."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from blockx.cli.text import rich_safe

if TYPE_CHECKING:
    from rich.progress import TaskID


class ProgressBars:
    def __init__(self, out: TextIO) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[extra]}"), TimeElapsedColumn(),
            console=Console(file=out), transient=True)
        self._bars: dict[str, TaskID] = {}

    def __enter__(self) -> "ProgressBars":
        self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.stop()

    def update(self, upd) -> None:
        """A client TaskUpdate (blockx.client.TaskUpdate)."""
        bar = self._bars.get(upd.task_id)
        if bar is None:
            # The description is rich markup: the task id is escaped (blockx.cli.text).
            bar = self._bars[upd.task_id] = self._progress.add_task(rich_safe(upd.task_id), total=None,
                                                                    extra=upd.state)
        p = upd.progress
        fields = {"extra": upd.state}
        if p is not None:
            bits = [upd.state]
            if p.failed:
                bits.append(f"{p.failed} failed")
            if p.retried:
                bits.append(f"{p.retried} retried")
            fields["extra"] = ", ".join(bits)
            self._progress.update(bar, total=p.total or None, completed=p.done, **fields)
        else:
            self._progress.update(bar, **fields)
        if upd.is_terminal:
            self._progress.stop_task(bar)
