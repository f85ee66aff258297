"""What the client commands print: a response or TaskUpdate as a JSON object
(outputs and plugin details are JSON in bytes fields on the wire and are decoded,
so the printout is plain JSON), one indented object or one compact line, and the
exit code a task's state maps to (blockx.cli.exit).

A result is also read by people (``show_result``, for submit and result):
- a FAILED task's remote traceback and locals go to stderr under the JSON, as
  Python prints an exception (with --compact stdout stays one line and stderr
  quiet: the JSON still has them, failureTraceback / failureLocals);
- on a terminal, a result whose JSON would not fit the screen prints a summary
  instead (state, counts, the first outputs) and says how to get it all
  (--json or --outputs all); a pipe, and --compact, get the whole JSON, as before;
- a submit answered with an earlier run of the same task id (the Worker keeps
  a task id's result for resultRetentionMs and returns it: idempotency) says so
  on stderr, with when that run was accepted and finished.

Counts: ``statistic.callCount`` counts the task's root calls (the call list's);
subcalls are not in it. ``blockx status`` counts every call the Worker ran,
subcalls included."""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import sys
import time
from typing import Any, TextIO

from blockx.cli.exit import EXIT_OK, EXIT_TASK_FAILED


def state_name(value: int) -> str:
    from blockx.client.outcome import state_name as name

    return name(value)


def decode_json_bytes(raw: bytes) -> Any:
    """A JSON-in-bytes field as JSON; anything else as {"base64": ...}."""
    try:
        return json.loads(raw)
    except ValueError:
        return {"base64": base64.b64encode(raw).decode()}


def result_to_json(r) -> dict[str, Any]:
    s = r.statistic
    return {
        "state": state_name(r.state),
        "failureCode": r.failure_code,
        "failureMessage": r.failure_message,
        "retryable": r.retryable,
        "outputs": [decode_json_bytes(o) for o in r.outputs],
        "outputsTotal": r.outputs_total, "outputsTruncated": r.outputs_truncated,
        "outputsWritten": r.outputs_written,
        "pluginResults": [{"plugin": p.plugin, "ok": p.ok, "message": p.message,
                           "details": decode_json_bytes(p.details) if p.details else None}
                          for p in r.plugin_results],
        "statistic": {
            "acceptedAtMs": s.accepted_at_ms, "finishedAtMs": s.finished_at_ms,
            "builderMs": s.builder_ms, "callsMs": s.calls_ms, "pluginMs": s.plugin_ms,
            "callCount": s.call_count, "callsFailed": s.calls_failed,
            "callRetries": s.call_retries, "cacheHits": s.cache_hits,
        },
        **({"failureCallId": r.failure_call_id, "failureTraceback": r.failure_traceback,
            "failureLocals": {v.name: v.value for v in r.failure_locals}} if r.failure_call_id else {}),
    }


def response_to_json(msg) -> dict[str, Any]:
    """SubmitTask / GetTaskResult / RequestTaskSlot responses and TaskUpdate."""
    out: dict[str, Any] = {"taskId": msg.task_id}
    if hasattr(msg, "slot_id") and msg.slot_id:
        out["slotId"] = msg.slot_id
    out["state"] = state_name(msg.state)
    if hasattr(msg, "is_terminal"):
        out["isTerminal"] = msg.is_terminal
    if hasattr(msg, "progress") and msg.HasField("progress"):
        p = msg.progress
        out["progress"] = {"callsTotal": p.calls_total, "callsDone": p.calls_done,
                           "callsFailed": p.calls_failed, "callsRetried": p.calls_retried}
    if msg.HasField("result"):
        out["result"] = result_to_json(msg.result)
    return out


def with_all_outputs(client, msg) -> dict[str, Any]:
    """``response_to_json(msg)`` with every output of its result: the pages after the
    one ``msg`` carries are fetched (blockx.client.pages) and appended."""
    obj = response_to_json(msg)
    if msg.HasField("result") and msg.result.outputs_truncated:
        res = obj["result"]
        outs = res["outputs"]
        for page in client.result_pages(msg.task_id, msg.result):
            outs.extend(decode_json_bytes(o) for o in page.outputs)
        res["outputsTruncated"] = False
    return obj


def dump(obj: Any, compact: bool, out: TextIO) -> None:
    if compact:
        out.write(json.dumps(obj, separators=(",", ":")) + "\n")
    else:
        out.write(json.dumps(obj, indent=2) + "\n")
    out.flush()


def exit_for(state: int) -> int:
    from blockx.worker.v1 import worker_pb2 as pb

    return EXIT_TASK_FAILED if state == pb.TASK_STATE_FAILED else EXIT_OK


def is_terminal(state: int) -> bool:
    from blockx.worker.v1 import worker_pb2 as pb

    return state in (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED)


# ---- for people ----------------------------------------------------------------------

COUNTS_HELP = ("statistic.callCount counts the task's root calls (its call list); subcalls are not "
               "counted there (blockx status counts every call, subcalls included)")


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    """--json / --outputs of the commands that print a result (submit, result)."""
    p.add_argument("--json", action="store_true",
                   help="print the whole result as JSON, even on a terminal (a pipe always gets it)")
    p.add_argument("--outputs", default=None, metavar="N|all", type=_outputs_arg,
                   help="on a terminal, a result taller than the screen is summarized with its first "
                        "outputs: show the first N, or all of them (the whole JSON, as --json)")


def _outputs_arg(text: str) -> int:
    if text == "all":
        return -1
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--outputs takes a count or 'all', not {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"--outputs takes a count >= 0 or 'all', not {text!r}")
    return n


def is_tty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def failure_text(msg) -> str:
    """The failure of a FAILED result and, under it, its remote traceback and the
    failed frame's locals ("" for a result that did not fail)."""
    from blockx.client.errors import failure_details

    if not msg.HasField("result") or not msg.result.failure_code:
        return ""
    r = msg.result
    locals_ = {v.name: v.value for v in r.failure_locals}
    return (f"task {msg.task_id} {state_name(msg.state)}: {r.failure_code}: {r.failure_message}"
            + failure_details(r.failure_call_id, r.failure_traceback, locals_) + "\n")


def _stamp(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000)) if ms > 0 else "an unknown time"


def earlier_run_note(msg, now_ms: int) -> str:
    """What to tell a person whose submit was answered with an earlier run."""
    s = msg.result.statistic if msg.HasField("result") else None
    accepted = s.accepted_at_ms if s is not None else 0
    finished = s.finished_at_ms if s is not None else 0
    ago = f", {max(0, now_ms - finished) // 1000} s ago" if finished else ""
    return (f"note: task {msg.task_id} already ran (accepted {_stamp(accepted)}, finished {_stamp(finished)}{ago}): "
            f"this is the result of that run, kept by the worker for resultRetentionMs; nothing ran now. "
            "Submit with another --task-id (or none, for a new one) to run it again.\n")


def is_earlier_run(msg, sent_at_ms: int) -> bool:
    """A SubmitTask reply that is terminal at once, for a task accepted before the
    submit was sent: the Worker answered with the result of an earlier run."""
    if not is_terminal(msg.state) or not msg.HasField("result"):
        return False
    accepted = msg.result.statistic.accepted_at_ms
    return 0 < accepted < sent_at_ms


def _screen() -> tuple[int, int]:
    size = shutil.get_terminal_size((100, 24))
    return max(size.columns, 20), max(size.lines, 6)


def summary_lines(msg, show: int | None, width: int, height: int) -> list[str]:
    """A result too tall for the screen: state, counts, the first outputs and how to get all."""
    r = msg.result
    s = r.statistic
    total = max(r.outputs_total, len(r.outputs))
    lines = [f"task {msg.task_id}: {state_name(msg.state)}, {total} output(s)"
             + (f", {r.outputs_written} written by the plugin" if r.outputs_written else "")]
    took = max(0, s.finished_at_ms - s.accepted_at_ms) if s.accepted_at_ms else 0
    lines.append(f"calls: {s.call_count} root calls (callCount; subcalls not counted), {s.calls_failed} failed, "
                 f"{s.call_retries} retries, {s.cache_hits} cache hits; took {took} ms")
    if r.failure_code:
        lines.append(f"failure: {r.failure_code}: {r.failure_message}")
    for p in r.plugin_results:
        lines.append(f"plugin {p.plugin}: {'ok' if p.ok else 'FAILED'}" + (f": {p.message}" if p.message else ""))
    room = height - len(lines) - 4
    n = min(len(r.outputs), show if show is not None else max(3, room))
    if n:
        lines.append(f"outputs (the first {n} of {total}):")
        for i, raw in enumerate(r.outputs[:n]):
            text = json.dumps(decode_json_bytes(raw), separators=(",", ":"))
            line = f"  [{i}] {text}"
            lines.append(line if len(line) <= width else line[:width - 3] + "...")
    if total > n:
        lines.append(f"... {total - n} more output(s) not shown: add --json (or --outputs all) "
                     "for the whole result as JSON, or pipe the command")
    return lines


def show_result(client, msg, ns, out: TextIO, err: TextIO | None = None) -> None:
    """Print a terminal (or current) result of submit / result for whoever reads it:
    the whole JSON to a pipe (or with --json / --outputs all), a summary to a
    terminal when the JSON is taller than the screen; then, unless --compact,
    the remote traceback of a FAILED task on stderr."""
    err = err if err is not None else sys.stderr
    show = getattr(ns, "outputs", None)
    # --compact asks for the JSON line itself (for a program, or a person's jq): never summarized.
    whole = (getattr(ns, "json", False) or ns.compact or show == -1 or not is_tty(out)
             or not msg.HasField("result"))
    if not whole:
        width, height = _screen()
        # A screenful of outputs: the rest of the result is a fixed ~30 lines, read as a whole.
        outs = response_to_json(msg)["result"]["outputs"]
        tall = (msg.result.outputs_truncated or show is not None
                or len(json.dumps(outs, indent=2).splitlines()) > height - 2)
        if tall:
            out.write("\n".join(summary_lines(msg, show, width, height)) + "\n")
            out.flush()
            _traceback(msg, ns, err)
            return
    dump(with_all_outputs(client, msg), ns.compact, out)
    _traceback(msg, ns, err)


def _traceback(msg, ns, err: TextIO) -> None:
    if ns.compact:
        return
    text = failure_text(msg)
    if text and (msg.result.failure_traceback or msg.result.failure_locals):
        err.write(text)
        err.flush()
