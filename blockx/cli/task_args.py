"""Building the pb.Task a `blockx submit` command line describes.

Two ways in: flags (--calls FN:ARGS for a callList, its grammar in
blockx.cli.call_grammar, or --payload for any builder) or --task-json, the proto JSON form in which payload and result-handler config hold
JSON directly rather than base64. Explicit flags override fields of the JSON task,
so a saved task can be re-sent with a new id or timeout. Every bad input is a
UsageError (exit 2) naming the flag, raised before anything is sent to the worker."""

from __future__ import annotations

import argparse
import base64
import json
import sys
import uuid
from typing import Any, TextIO

from blockx.cli.call_grammar import parse_call
from blockx.cli.exit import UsageError

# --policy values -> CallFailurePolicy enum names (one spelling each).
POLICIES = {
    "fast-fail": "CALL_FAILURE_POLICY_FAST_FAIL",
    "continue": "CALL_FAILURE_POLICY_CONTINUE",
    "unspecified": "CALL_FAILURE_POLICY_UNSPECIFIED",
}


def _read_text(value: str, what: str, stdin: TextIO | None = None) -> str:
    if value == "-":
        return (stdin or sys.stdin).read()
    if value.startswith("@"):
        try:
            with open(value[1:], encoding="utf-8") as fh:
                return fh.read()
        except OSError as exc:
            raise UsageError(f"{what}: cannot read {value[1:]!r}: {exc.strerror or exc}") from None
    return value


def _json_bytes(text: str, what: str) -> bytes:
    try:
        json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{what} is not valid JSON: {exc}") from None
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
        raise UsageError("--task-json must hold a JSON object")
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
            obj[key] = POLICIES.get(short, POLICIES.get(short.replace("_", "-"), v))
    try:
        return json_format.ParseDict(obj, pb.Task())
    except json_format.ParseError as exc:
        raise UsageError(f"--task-json: {exc}") from None


def task_from_args(ns: argparse.Namespace, stdin: TextIO | None = None):
    """The pb.Task a `submit` command line describes."""
    from blockx.worker.v1 import worker_pb2 as pb

    if ns.task_json is not None:
        text = _read_text(ns.task_json if ns.task_json == "-" else "@" + ns.task_json, "--task-json", stdin)
        try:
            task = task_from_json(json.loads(text))
        except ValueError as exc:
            if isinstance(exc, UsageError):
                raise
            raise UsageError(f"--task-json is not valid JSON: {exc}") from None
    else:
        task = pb.Task()
        if ns.calls is None and ns.payload is None:
            raise UsageError("submit needs --calls, --payload or --task-json")

    if ns.task_id is not None:
        task.task_id = ns.task_id
    if not task.task_id:
        task.task_id = str(uuid.uuid4())

    if ns.calls is not None and ns.payload is not None:
        raise UsageError("give either --calls or --payload, not both")
    builder = ns.builder
    if ns.calls is not None:
        if builder not in (None, "callList"):
            raise UsageError(f"--calls builds a callList payload; it cannot be used with --builder {builder}")
        # argparse parsed each --calls already (call_grammar.calls_arg); a namespace built
        # by hand may still hold the text
        payload = {"calls": [c if isinstance(c, dict) else parse_call(c) for c in ns.calls]}
        task.function_call.type = "callList"
        task.function_call.payload = json.dumps(payload, separators=(",", ":")).encode()
    elif ns.payload is not None:
        task.function_call.type = builder or task.function_call.type or "callList"
        task.function_call.payload = _json_bytes(_read_text(ns.payload, "--payload", stdin), "--payload")
    elif builder is not None:
        task.function_call.type = builder
    if not task.function_call.type:
        raise UsageError("the task names no builder (functionCall.type)")

    if ns.result_config is not None and ns.result_handler is None and not task.HasField("result_handler"):
        raise UsageError("--result-config needs --result-handler")
    if ns.result_handler is not None:
        task.result_handler.type = ns.result_handler
    if ns.result_config is not None:
        task.result_handler.config = _json_bytes(_read_text(ns.result_config, "--result-config", stdin),
                                                 "--result-config")
    if ns.timeout_ms is not None:
        if ns.timeout_ms < 0:
            raise UsageError("--timeout-ms must be >= 0")
        task.task_timeout_ms = ns.timeout_ms
    if ns.policy is not None:
        task.call_failure_policy = pb.CallFailurePolicy.Value(POLICIES[ns.policy])
    for flag, attr in (("max_attempts", "max_attempts"), ("base_backoff_ms", "base_backoff_ms"),
                       ("jitter_percent", "jitter_percent")):
        v = getattr(ns, flag)
        if v is not None:
            if v < 0:
                raise UsageError(f"--{flag.replace('_', '-')} must be >= 0")
            setattr(task.call_retry_policy, attr, v)
    if ns.instance_id is not None:
        task.instance_id = ns.instance_id
    return task
