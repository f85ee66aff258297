"""The client commands `blockx submit | watch | result | slot`, and their output.

On a terminal, `submit` and `watch` show a progress bar per task while it runs
(blockx.cli_progress) and then print the terminal update as JSON; when stdout is not a
terminal they print JSON only. Each command opens one session (blockx.client) to --addr,
makes its requests and prints JSON on stdout: one indented object (or one line with --compact) for submit /
result / slot, one compact object per line for streams (watch, submit --watch), so
the output pipes into jq line by line. `submit` (waiting) and `result` print every
output of the task, fetching the pages after the first (blockx.client.pages);
`watch`, `submit --watch` and `--no-wait` print each message as it came, whose
result carries its first page (outputsTotal, outputsTruncated). Outputs and plugin details are JSON in bytes
fields on the wire and are decoded, so the printout is plain JSON. A refusal
prints `error: CODE: message` on stderr and exits 1; a task that reached FAILED
exits 3 (codes in blockx.cli_exit). The client library (and grpc) is imported on
first use, so `blockx serve` and `--help` do not pay for it."""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Iterable
from typing import Any, TextIO

from blockx.cli_exit import EXIT_ERROR, EXIT_OK, EXIT_TASK_FAILED, CLIError
from blockx.cli_task import task_from_args


# --- JSON rendering -----------------------------------------------------------------------


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
        "pluginResults": [{"plugin": p.plugin, "ok": p.ok, "message": p.message,
                           "details": decode_json_bytes(p.details) if p.details else None}
                          for p in r.plugin_results],
        "statistic": {
            "acceptedAtMs": s.accepted_at_ms, "finishedAtMs": s.finished_at_ms,
            "builderMs": s.builder_ms, "callsMs": s.calls_ms, "pluginMs": s.plugin_ms,
            "callCount": s.call_count, "callsFailed": s.calls_failed,
            "callRetries": s.call_retries, "cacheHits": s.cache_hits,
        },
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


def _with_all_outputs(client, msg) -> dict[str, Any]:
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


def _dump(obj: Any, compact: bool, out: TextIO) -> None:
    if compact:
        out.write(json.dumps(obj, separators=(",", ":")) + "\n")
    else:
        out.write(json.dumps(obj, indent=2) + "\n")
    out.flush()


def _exit_for(state: int) -> int:
    from blockx.worker.v1 import worker_pb2 as pb

    return EXIT_TASK_FAILED if state == pb.TASK_STATE_FAILED else EXIT_OK


def _is_terminal(state: int) -> bool:
    from blockx.worker.v1 import worker_pb2 as pb

    return state in (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED)


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """--tls-ca / --tls-cert / --tls-key, defaulting to $BLOCKX_TLS_CA / _CERT / _KEY."""
    import os

    for flag, env, what in (("--tls-ca", "BLOCKX_TLS_CA", "CA certificate (PEM) that signed the worker's "
                                                          "certificate; turns TLS on"),
                            ("--tls-cert", "BLOCKX_TLS_CERT", "client certificate (PEM) for mutual TLS"),
                            ("--tls-key", "BLOCKX_TLS_KEY", "key (PEM) of --tls-cert")):
        parser.add_argument(flag, default=os.environ.get(env, ""), metavar="FILE",
                            help=f"{what} (default: ${env})")
    parser.add_argument("--token", default=None, metavar="TOKEN",
                        help="bearer token for a worker with WORKER_AUTH_MODE=token (default: $BLOCKX_TOKEN, "
                             "else the token the worker generated on this host, <STATE_DIR>/auth-token)")


def token_from_args(ns: argparse.Namespace):
    """--token when given, else the client's default resolution (blockx.client.credentials)."""
    from blockx.client.credentials import TOKEN_FROM_ENV

    token = getattr(ns, "token", None)
    return TOKEN_FROM_ENV if token is None else token


def tls_from_args(ns: argparse.Namespace):
    """A ClientTLS when any --tls-* option (or its env var) is set, else None (plaintext)."""
    from blockx.client import ClientTLS

    ca, cert, key = getattr(ns, "tls_ca", ""), getattr(ns, "tls_cert", ""), getattr(ns, "tls_key", "")
    if not (ca or cert or key):
        return None
    try:
        return ClientTLS(ca, cert, key)
    except ValueError as exc:
        raise CLIError(str(exc)) from None


def _client_command(fn):
    """Run a client command body over one session (blockx.client); a refusal or a
    broken session becomes `error: CODE: message`, exit 1."""
    def wrapper(ns: argparse.Namespace, out: TextIO | None = None) -> int:
        from blockx.client import BlockxError, connect
        from blockx.client.tls import TLSFileError

        out = out or sys.stdout
        try:
            with connect(ns.addr, connect_timeout_s=ns.rpc_timeout, tls=tls_from_args(ns),
                         token=token_from_args(ns)) as client:
                return fn(ns, client, out)
        except BlockxError as exc:
            from blockx.cli_text import term_safe   # the worker's message, escaped for the terminal
            print(f"error: {exc.code.name}: {term_safe(exc.message, keep_newlines=True)}", file=sys.stderr)
            return EXIT_ERROR
        except TLSFileError as exc:
            raise CLIError(str(exc)) from None

    wrapper.__name__ = fn.__name__
    return wrapper


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
        from blockx.cli_progress import ProgressBars

        with ProgressBars(out) as bars:
            for upd in client.watch(task_ids):
                last[upd.task_id] = upd.raw
                bars.update(upd)
        for upd in last.values():
            _dump(response_to_json(upd), compact, out)
        return last
    for upd in client.watch(task_ids):
        last[upd.task_id] = upd.raw
        if print_all:
            _dump(response_to_json(upd.raw), compact, out)
    return last


@_client_command
def _submit(ns: argparse.Namespace, client, out: TextIO) -> int:
    task = task_from_args(ns)
    if ns.no_wait or ns.watch:
        resp = client.submit(task=task, slot_id=ns.slot or "", wait=False).raw
        if ns.no_wait or _is_terminal(resp.state):
            _dump(response_to_json(resp), ns.compact, out)
            return _exit_for(resp.state)
        _dump(response_to_json(resp), True, out)
        last = _watch(client, [task.task_id], out, print_all=True)
        upd = last.get(task.task_id)
        if upd is None:
            print(f"error: the watch of task {task.task_id} ended without an update", file=sys.stderr)
            return EXIT_ERROR
        return _exit_for(upd.state)
    if _bars(out):            # a progress bar while it runs, then the terminal update
        resp = client.submit(task=task, slot_id=ns.slot or "", wait=False).raw
        if not _is_terminal(resp.state):
            from blockx.cli_progress import ProgressBars

            final = resp
            with ProgressBars(out) as bars:
                for upd in client.watch([task.task_id]):
                    bars.update(upd)
                    final = upd.raw
            _dump(_with_all_outputs(client, final), ns.compact, out)
            return _exit_for(final.state)
        _dump(_with_all_outputs(client, resp), ns.compact, out)
        return _exit_for(resp.state)
    final = client.submit(task=task, slot_id=ns.slot or "").raw    # SubmitTaskResponse or terminal TaskUpdate
    _dump(_with_all_outputs(client, final), ns.compact, out)
    return _exit_for(final.state)


def cmd_submit(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    if getattr(ns, "etcd", None):
        from blockx.cli_fleet import cmd_submit_cluster

        if ns.slot:
            raise CLIError("--slot names a slot on one worker; it cannot be used with --etcd")
        return cmd_submit_cluster(ns, task_from_args(ns), out or sys.stdout, _dump)
    return _submit(ns, out)


@_client_command
def _watch_cmd(ns: argparse.Namespace, client, out: TextIO) -> int:
    last = _watch(client, ns.task_ids, out, print_all=True)
    states = [u.state for u in last.values()]
    return EXIT_TASK_FAILED if any(_exit_for(s) for s in states) else EXIT_OK


def cmd_watch(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    return _watch_cmd(ns, out)


@_client_command
def _result(ns: argparse.Namespace, client, out: TextIO) -> int:
    resp = client.result(ns.task_id).raw
    _dump(_with_all_outputs(client, resp), ns.compact, out)
    return _exit_for(resp.state)


def cmd_result(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    return _result(ns, out)


@_client_command
def _slot(ns: argparse.Namespace, client, out: TextIO) -> int:
    resp = client.request_slot(ns.task_id, ns.ttl_ms).raw
    _dump(response_to_json(resp), ns.compact, out)
    return _exit_for(resp.state)


def cmd_slot(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    if ns.ttl_ms < 0:
        raise CLIError("--ttl-ms must be >= 0")
    return _slot(ns, out)
