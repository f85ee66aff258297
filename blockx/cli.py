"""`blockx`: run a Worker (`blockx serve`) or talk to one (submit, watch, result, slot).

Client commands print JSON on stdout: one indented object for submit / result /
slot, one compact object per line for streams (watch, submit --watch). Outputs
and plugin details are JSON on the wire (bytes fields) and are decoded, so the
printout is plain JSON. Exit codes: 0 ok, 1 RPC or input error ("error: CODE:
message" on stderr), 2 bad usage or configuration, 3 a task reached FAILED,
130 interrupted."""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_TASK_FAILED = 3
EXIT_INTERRUPTED = 130

DEFAULT_ADDR = "127.0.0.1:8081"
DEFAULT_RPC_TIMEOUT_S = 10.0

_POLICIES = {
    "fast-fail": "CALL_FAILURE_POLICY_FAST_FAIL",
    "fast_fail": "CALL_FAILURE_POLICY_FAST_FAIL",
    "continue": "CALL_FAILURE_POLICY_CONTINUE",
    "unspecified": "CALL_FAILURE_POLICY_UNSPECIFIED",
}


class CLIError(Exception):
    """Bad input to a client command: printed as `error: <message>`, exit 1."""


# --- parser ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="blockx", description="BlockX Worker: serve, or talk to a running worker.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    s = sub.add_parser("serve", help="run a Worker", description=(
        "Run a Worker. Configuration: defaults -> profile -> WORKER_CONFIG JSON file "
        "(or --config) -> environment variables."))
    s.add_argument("--profile", choices=("block", "bundle"), default=os.environ.get("BLOCKX_PROFILE", "block"),
                   help="deployment profile (default: $BLOCKX_PROFILE or block)")
    s.add_argument("--config", metavar="FILE", default=None,
                   help="JSON configuration file (takes the place of $WORKER_CONFIG)")
    s.add_argument("--print-config", action="store_true",
                   help="print the effective configuration as JSON and exit (2 if it is invalid)")
    s.set_defaults(func=cmd_serve)

    client = argparse.ArgumentParser(add_help=False)
    client.add_argument("--addr", default=os.environ.get("BLOCKX_ADDR", DEFAULT_ADDR),
                        help=f"worker address host:port (default: $BLOCKX_ADDR or {DEFAULT_ADDR})")
    client.add_argument("--rpc-timeout", type=float, default=DEFAULT_RPC_TIMEOUT_S, metavar="SECONDS",
                        help="deadline of each unary RPC (default: %(default)s)")
    client.add_argument("--compact", action="store_true", help="print single-line JSON")

    sm = sub.add_parser("submit", parents=[client], help="submit a task", description=(
        "Submit a task and wait for its result. Build it from flags (--calls / --payload) "
        "or from --task-json; explicit flags override fields of the JSON task."))
    sm.add_argument("--task-id", default=None, help="task id (default: a new UUID)")
    sm.add_argument("--builder", default=None, help="call builder name (default: callList)")
    sm.add_argument("--calls", action="append", default=None, metavar="FN:ARGS",
                    help="a callList call, e.g. 'add:1,2' or 'echo:{\"k\":1}' (repeatable)")
    sm.add_argument("--payload", default=None, metavar="JSON|@FILE", help="builder payload (JSON)")
    sm.add_argument("--result-handler", default=None, metavar="PLUGIN", help="writer plugin, e.g. log or test")
    sm.add_argument("--result-config", default=None, metavar="JSON|@FILE", help="writer plugin config (JSON)")
    sm.add_argument("--timeout-ms", type=int, default=None, help="task timeout (0: the worker's default)")
    sm.add_argument("--policy", default=None, choices=sorted(_POLICIES), help="call failure policy")
    sm.add_argument("--max-attempts", type=int, default=None, help="call retry: max attempts")
    sm.add_argument("--base-backoff-ms", type=int, default=None, help="call retry: base backoff")
    sm.add_argument("--jitter-percent", type=int, default=None, help="call retry: jitter percent (0..5)")
    sm.add_argument("--instance-id", default=None, help="fairness key")
    sm.add_argument("--task-json", default=None, metavar="FILE|-", help="the task as JSON (- for stdin)")
    sm.add_argument("--slot", default=None, metavar="SLOT_ID", help="slot id from a prior `blockx slot`")
    mode = sm.add_mutually_exclusive_group()
    mode.add_argument("--watch", action="store_true", help="print every TaskUpdate until terminal")
    mode.add_argument("--no-wait", action="store_true", help="print the SubmitTask response and exit")
    sm.set_defaults(func=cmd_submit)

    w = sub.add_parser("watch", parents=[client], help="stream task updates until terminal")
    w.add_argument("task_ids", nargs="+", metavar="TASK_ID")
    w.set_defaults(func=cmd_watch)

    r = sub.add_parser("result", parents=[client], help="get a task's state and result")
    r.add_argument("task_id", metavar="TASK_ID")
    r.set_defaults(func=cmd_result)

    sl = sub.add_parser("slot", parents=[client], help="reserve a task slot")
    sl.add_argument("task_id", metavar="TASK_ID")
    sl.add_argument("--ttl-ms", type=int, default=0, help="reservation TTL (0: the worker's default)")
    sl.set_defaults(func=cmd_slot)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        return ns.func(ns)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except CLIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        return EXIT_ERROR


# --- serve ------------------------------------------------------------------------------


def cmd_serve(ns: argparse.Namespace) -> int:
    from blockx.app.config import ConfigError, load_config
    from blockx.app.profile import ProfileError, get_profile

    try:
        profile = get_profile(ns.profile)
        profile.validate()
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        cfg = load_config(profile, config_path=ns.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    problems = cfg.violations(profile)
    if ns.print_config:
        print(cfg.to_json())
    if problems:
        print(f"error: {ConfigError(problems)}", file=sys.stderr)
        return EXIT_USAGE
    if ns.print_config:
        return EXIT_OK
    from blockx.app.run import serve

    return serve(cfg, profile)


# --- task construction --------------------------------------------------------------------


def parse_call(text: str) -> dict[str, Any]:
    """'add:1,2' -> {"functionId": "add", "args": [1, 2]}.

    ARGS is read as the inside of a JSON array ('1,2', '"a,b"', '{"k":1},[2]'); if
    that is not valid JSON, it is split on commas and each part is JSON or else a
    plain string ('echo:hello' -> ["hello"])."""
    fid, _, rest = text.partition(":")
    fid = fid.strip()
    if not fid:
        raise CLIError(f"--calls {text!r}: missing function id (expected FN:ARGS, e.g. add:1,2)")
    rest = rest.strip()
    if not rest:
        return {"functionId": fid, "args": []}
    try:
        args = json.loads("[" + rest + "]")
    except ValueError:
        args = []
        for part in rest.split(","):
            part = part.strip()
            try:
                args.append(json.loads(part))
            except ValueError:
                args.append(part)
    return {"functionId": fid, "args": args}


def _read_text(value: str, what: str, stdin: TextIO | None = None) -> str:
    if value == "-":
        return (stdin or sys.stdin).read()
    if value.startswith("@"):
        try:
            with open(value[1:], encoding="utf-8") as fh:
                return fh.read()
        except OSError as exc:
            raise CLIError(f"{what}: cannot read {value[1:]!r}: {exc.strerror or exc}") from None
    return value


def _json_bytes(text: str, what: str) -> bytes:
    try:
        json.loads(text)
    except ValueError as exc:
        raise CLIError(f"{what} is not valid JSON: {exc}") from None
    return text.strip().encode()


def _bytes_field(value: Any, what: str) -> bytes:
    """A payload / config in a --task-json file: an object or array is encoded; a
    string is taken as the JSON text itself."""
    if isinstance(value, str):
        return _json_bytes(value, what) if value.strip() else b""
    return json.dumps(value, separators=(",", ":")).encode()


def task_from_json(obj: Any):
    """pb.Task from the JSON form (proto JSON names, camelCase or snake_case), except that
    functionCall.payload and resultHandler.config hold JSON directly, not base64."""
    from google.protobuf import json_format

    from blockx.worker.v1 import worker_pb2 as pb

    if not isinstance(obj, dict):
        raise CLIError("--task-json must hold a JSON object")
    obj = dict(obj)
    for outer, inner in (("functionCall", "payload"), ("function_call", "payload"),
                         ("resultHandler", "config"), ("result_handler", "config")):
        sub = obj.get(outer)
        if isinstance(sub, dict) and inner in sub:
            sub = dict(sub)
            sub[inner] = base64.b64encode(_bytes_field(sub[inner], f"--task-json {outer}.{inner}")).decode()
            obj[outer] = sub
    for key in ("callFailurePolicy", "call_failure_policy"):
        v = obj.get(key)
        if isinstance(v, str):
            short = v.strip().lower().replace("call_failure_policy_", "")
            obj[key] = _POLICIES.get(short, _POLICIES.get(short.replace("_", "-"), v))
    try:
        return json_format.ParseDict(obj, pb.Task())
    except json_format.ParseError as exc:
        raise CLIError(f"--task-json: {exc}") from None


def task_from_args(ns: argparse.Namespace, stdin: TextIO | None = None):
    """The pb.Task a `submit` command line describes."""
    from blockx.worker.v1 import worker_pb2 as pb

    if ns.task_json is not None:
        text = _read_text(ns.task_json if ns.task_json == "-" else "@" + ns.task_json, "--task-json", stdin)
        try:
            task = task_from_json(json.loads(text))
        except ValueError as exc:
            if isinstance(exc, CLIError):
                raise
            raise CLIError(f"--task-json is not valid JSON: {exc}") from None
    else:
        task = pb.Task()
        if ns.calls is None and ns.payload is None:
            raise CLIError("submit needs --calls, --payload or --task-json")

    if ns.task_id is not None:
        task.task_id = ns.task_id
    if not task.task_id:
        task.task_id = str(uuid.uuid4())

    if ns.calls is not None and ns.payload is not None:
        raise CLIError("give either --calls or --payload, not both")
    builder = ns.builder
    if ns.calls is not None:
        if builder not in (None, "callList"):
            raise CLIError(f"--calls builds a callList payload; it cannot be used with --builder {builder}")
        payload = {"calls": [parse_call(c) for c in ns.calls]}
        task.function_call.type = "callList"
        task.function_call.payload = json.dumps(payload, separators=(",", ":")).encode()
    elif ns.payload is not None:
        task.function_call.type = builder or task.function_call.type or "callList"
        task.function_call.payload = _json_bytes(_read_text(ns.payload, "--payload", stdin), "--payload")
    elif builder is not None:
        task.function_call.type = builder
    if not task.function_call.type:
        raise CLIError("the task names no builder (functionCall.type)")

    if ns.result_config is not None and ns.result_handler is None and not task.HasField("result_handler"):
        raise CLIError("--result-config needs --result-handler")
    if ns.result_handler is not None:
        task.result_handler.type = ns.result_handler
    if ns.result_config is not None:
        task.result_handler.config = _json_bytes(_read_text(ns.result_config, "--result-config", stdin),
                                                 "--result-config")
    if ns.timeout_ms is not None:
        if ns.timeout_ms < 0:
            raise CLIError("--timeout-ms must be >= 0")
        task.task_timeout_ms = ns.timeout_ms
    if ns.policy is not None:
        task.call_failure_policy = pb.CallFailurePolicy.Value(_POLICIES[ns.policy])
    for flag, attr in (("max_attempts", "max_attempts"), ("base_backoff_ms", "base_backoff_ms"),
                       ("jitter_percent", "jitter_percent")):
        v = getattr(ns, flag)
        if v is not None:
            if v < 0:
                raise CLIError(f"--{flag.replace('_', '-')} must be >= 0")
            setattr(task.call_retry_policy, attr, v)
    if ns.instance_id is not None:
        task.instance_id = ns.instance_id
    return task


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


# --- client commands ----------------------------------------------------------------------


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


if __name__ == "__main__":
    sys.exit(main())
