"""Building the pb.Task that ``submit(calls=...)`` describes."""
from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import json

from blockx.worker.v1 import worker_pb2 as pb


def new_task_id() -> str:
    return uuid.uuid4().hex


def call_list_payload(calls: Iterable[tuple[str, Any]]) -> bytes:
    """``[("add", [1, 2]), ...]`` -> the callList builder's JSON payload."""
    out = []
    for call in calls:
        try:
            fid, args = call
        except (TypeError, ValueError):
            raise TypeError(f"a call is a (function_id, args) pair, got {call!r}") from None
        if not isinstance(fid, str) or not fid:
            raise TypeError(f"a call's function id must be a non-empty string, got {fid!r}")
        out.append({"functionId": fid, "args": list(args) if isinstance(args, (list, tuple)) else [args]})
    # Compact and UTF-8 as the Worker's own encoder writes it; NaN and infinities
    # are refused (they are not JSON) rather than sent as something else.
    return json.dumps({"calls": out}, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def build_task(*, calls=None, task: pb.Task | None = None, task_id: str | None = None,
               timeout_ms: int = 0) -> pb.Task:
    """Exactly one of ``calls`` (a callList) or ``task`` (a full pb.Task, copied).
    ``task_id`` and ``timeout_ms`` override the task's own when given."""
    if (calls is None) == (task is None):
        raise TypeError("give exactly one of calls=[(function_id, args), ...] or task=pb.Task(...)")
    if task is None:
        out = pb.Task(function_call=pb.FunctionCallConfig(type="callList", payload=call_list_payload(calls)))
    else:
        out = pb.Task()
        out.CopyFrom(task)
    if task_id:
        out.task_id = task_id
    if not out.task_id:
        out.task_id = new_task_id()
    if timeout_ms:
        out.task_timeout_ms = timeout_ms
    return out
