"""The client commands `blockx submit | watch | result | slot`, and their output.

Each command opens one insecure gRPC channel to --addr, makes its calls and prints
JSON on stdout: one indented object (or one line with --compact) for submit /
result / slot, one compact object per line for streams (watch, submit --watch), so
the output pipes into jq line by line. Outputs and plugin details are JSON in bytes
fields on the wire and are decoded, so the printout is plain JSON. A gRPC failure
prints `error: CODE: message` on stderr and exits 1; a task that reached FAILED
exits 3 (codes in blockx.cli_exit). grpc and the generated stubs are imported on
first use, so `blockx serve` and `--help` do not pay for them."""

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
    from blockx.worker.v1 import worker_pb2 as pb

    try:
        return pb.TaskState.Name(value).removeprefix("TASK_STATE_")
    except ValueError:
        return str(value)


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
    if msg.HasField("result"):
        out["result"] = result_to_json(msg.result)
    return out


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


def _stub(addr: str):
    import grpc

    from blockx.worker.v1 import worker_pb2_grpc

    channel = grpc.insecure_channel(addr)
    return channel, worker_pb2_grpc.WorkerServiceStub(channel)


def _rpc(fn):
    """Run a client command body; a gRPC failure becomes `error: CODE: message`, exit 1."""
    import grpc

    def wrapper(ns: argparse.Namespace, out: TextIO | None = None) -> int:
        out = out or sys.stdout
        channel, stub = _stub(ns.addr)
        try:
            return fn(ns, stub, out)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            name = code.name if code is not None else "UNKNOWN"
            details = exc.details() if hasattr(exc, "details") else str(exc)
            print(f"error: {name}: {details}", file=sys.stderr)
            return EXIT_ERROR
        finally:
            channel.close()

    wrapper.__name__ = fn.__name__
    return wrapper


def _watch(stub, task_ids: Iterable[str], out: TextIO, print_all: bool, compact: bool = True):
    """Stream updates; return {task_id: last update}. Prints each update when print_all."""
    from blockx.worker.v1 import worker_pb2 as pb

    last: dict[str, Any] = {}
    for upd in stub.WatchTasks(pb.WatchTasksRequest(task_ids=list(task_ids))):
        last[upd.task_id] = upd
        if print_all:
            _dump(response_to_json(upd), compact, out)
    return last


@_rpc
def _submit(ns: argparse.Namespace, stub, out: TextIO) -> int:
    from blockx.worker.v1 import worker_pb2 as pb

    task = task_from_args(ns)
    resp = stub.SubmitTask(pb.SubmitTaskRequest(task=task, slot_id=ns.slot or ""), timeout=ns.rpc_timeout)
    if ns.no_wait or _is_terminal(resp.state):
        _dump(response_to_json(resp), ns.compact, out)
        return _exit_for(resp.state)
    if ns.watch:
        _dump(response_to_json(resp), True, out)
    last = _watch(stub, [task.task_id], out, print_all=ns.watch)
    upd = last.get(task.task_id)
    if upd is None:
        print(f"error: the watch of task {task.task_id} ended without an update", file=sys.stderr)
        return EXIT_ERROR
    if not ns.watch:
        _dump(response_to_json(upd), ns.compact, out)
    return _exit_for(upd.state)


def cmd_submit(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    return _submit(ns, out)


@_rpc
def _watch_cmd(ns: argparse.Namespace, stub, out: TextIO) -> int:
    last = _watch(stub, ns.task_ids, out, print_all=True)
    states = [u.state for u in last.values()]
    return EXIT_TASK_FAILED if any(_exit_for(s) for s in states) else EXIT_OK


def cmd_watch(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    return _watch_cmd(ns, out)


@_rpc
def _result(ns: argparse.Namespace, stub, out: TextIO) -> int:
    from blockx.worker.v1 import worker_pb2 as pb

    resp = stub.GetTaskResult(pb.GetTaskResultRequest(task_id=ns.task_id), timeout=ns.rpc_timeout)
    _dump(response_to_json(resp), ns.compact, out)
    return _exit_for(resp.state)


def cmd_result(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    return _result(ns, out)


@_rpc
def _slot(ns: argparse.Namespace, stub, out: TextIO) -> int:
    from blockx.worker.v1 import worker_pb2 as pb

    if ns.ttl_ms < 0:
        raise CLIError("--ttl-ms must be >= 0")
    resp = stub.RequestTaskSlot(pb.RequestTaskSlotRequest(task_id=ns.task_id, ttl_ms=ns.ttl_ms),
                                timeout=ns.rpc_timeout)
    _dump(response_to_json(resp), ns.compact, out)
    return _exit_for(resp.state)


def cmd_slot(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    return _slot(ns, out)
