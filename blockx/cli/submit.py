"""The client commands `blockx submit | watch | result | slot`, and their output.

On a terminal, `submit` and `watch` show a progress bar per task while it runs
(blockx.cli.progress) and then print the terminal update as JSON; when stdout is not a
terminal they print JSON only. Each command opens one session (blockx.client) to --addr,
makes its requests and prints JSON on stdout: one indented object (or one line with --compact) for submit /
result / slot, one compact object per line for streams (watch, submit --watch), so
the output pipes into jq line by line. `submit` (waiting) and `result` print every
output of the task, fetching the pages after the first (blockx.client.pages);
`watch`, `submit --watch` and `--no-wait` print each message as it came, whose
result carries its first page (outputsTotal, outputsTruncated). Outputs and plugin details are JSON in bytes
fields on the wire and are decoded, so the printout is plain JSON. A refusal
prints `error: CODE: message` on stderr and exits 1; a task that reached FAILED
exits 3 (codes in blockx.cli.exit). The JSON is rendered by blockx.cli.output, the
session opened by blockx.cli.connection; output.show_result also puts a failed
task's remote traceback on stderr and summarizes, on a terminal, a result taller
than the screen, and a submit answered with an earlier run of its task id says
so on stderr."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from typing import Any, TextIO

from blockx.cli.connection import client_command
from blockx.cli.exit import EXIT_ERROR, EXIT_OK, EXIT_TASK_FAILED, UsageError
from blockx.cli.output import (dump, earlier_run_note, exit_for, is_earlier_run, is_terminal, response_to_json,
                               show_result)
from blockx.cli.task_args import task_from_args


def _is_tty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def _bars(out: TextIO) -> bool:
    """Progress bars: on a terminal, when rich (the `cli` extra) is installed."""
    from blockx.extras import has

    return _is_tty(out) and has("cli")


def _watch(client, task_ids: Iterable[str], out: TextIO, print_all: bool, compact: bool = True):
    """Stream updates; return {task_id: last pb.TaskUpdate}. When print_all: on a
    terminal, a progress bar per task and each terminal update as JSON; otherwise
    every update (progress included) as a JSON line."""
    last: dict[str, Any] = {}
    if print_all and _bars(out):
        from blockx.cli.progress import ProgressBars

        with ProgressBars(out) as bars:
            for upd in client.watch(task_ids):
                last[upd.task_id] = upd.raw
                bars.update(upd)
        for upd in last.values():
            dump(response_to_json(upd), compact, out)
        return last
    for upd in client.watch(task_ids):
        last[upd.task_id] = upd.raw
        if print_all:
            dump(response_to_json(upd.raw), compact, out)
    return last


def _note_earlier_run(resp, sent_at_ms: int) -> None:
    """An answer with an earlier run of this task id (idempotency) is said on stderr."""
    if is_earlier_run(resp, sent_at_ms):
        sys.stderr.write(earlier_run_note(resp, int(time.time() * 1000)))
        sys.stderr.flush()


@client_command
def _submit(ns: argparse.Namespace, client, out: TextIO) -> int:
    task = ns.built_task
    sent_at_ms = int(time.time() * 1000)
    if ns.no_wait or ns.watch:
        resp = client.submit(task=task, slot_id=ns.slot or "", wait=False).raw
        _note_earlier_run(resp, sent_at_ms)
        if ns.no_wait or is_terminal(resp.state):
            dump(response_to_json(resp), ns.compact, out)
            return exit_for(resp.state)
        dump(response_to_json(resp), True, out)
        last = _watch(client, [task.task_id], out, print_all=True)
        upd = last.get(task.task_id)
        if upd is None:
            print(f"error: the watch of task {task.task_id} ended without an update", file=sys.stderr)
            return EXIT_ERROR
        return exit_for(upd.state)
    if _bars(out):            # a progress bar while it runs, then the terminal update
        resp = client.submit(task=task, slot_id=ns.slot or "", wait=False).raw
        if not is_terminal(resp.state):
            from blockx.cli.progress import ProgressBars

            final = resp
            with ProgressBars(out) as bars:
                for upd in client.watch([task.task_id]):
                    bars.update(upd)
                    final = upd.raw
            show_result(client, final, ns, out)
            return exit_for(final.state)
        _note_earlier_run(resp, sent_at_ms)
        show_result(client, resp, ns, out)
        return exit_for(resp.state)
    final = client.submit(task=task, slot_id=ns.slot or "").raw    # SubmitTaskResponse or terminal TaskUpdate
    if not hasattr(final, "is_terminal"):      # terminal in SubmitTask's own reply: maybe an earlier run
        _note_earlier_run(final, sent_at_ms)
    show_result(client, final, ns, out)
    return exit_for(final.state)


def cmd_submit(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    ns.built_task = task_from_args(ns)     # a usage error (exit 2) ends it here, before it connects
    if getattr(ns, "etcd", None):
        from blockx.cli.fleet import cmd_submit_cluster

        if ns.slot:
            raise UsageError("--slot names a slot on one worker; it cannot be used with --etcd")
        return cmd_submit_cluster(ns, ns.built_task, out or sys.stdout, dump)
    return _submit(ns, out)


@client_command
def _watch_cmd(ns: argparse.Namespace, client, out: TextIO) -> int:
    last = _watch(client, ns.task_ids, out, print_all=True)
    states = [u.state for u in last.values()]
    return EXIT_TASK_FAILED if any(exit_for(s) for s in states) else EXIT_OK


def cmd_watch(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    return _watch_cmd(ns, out)


@client_command
def _result(ns: argparse.Namespace, client, out: TextIO) -> int:
    resp = client.result(ns.task_id).raw
    show_result(client, resp, ns, out)
    return exit_for(resp.state)


def cmd_result(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    return _result(ns, out)


@client_command
def _slot(ns: argparse.Namespace, client, out: TextIO) -> int:
    resp = client.request_slot(ns.task_id, ns.ttl_ms).raw
    dump(response_to_json(resp), ns.compact, out)
    return exit_for(resp.state)


def cmd_slot(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    if ns.ttl_ms < 0:
        raise UsageError("--ttl-ms must be >= 0")
    return _slot(ns, out)
