"""Where a failed call's traceback goes: to its parent, or into its task's result.

An executor's CallFailed carries ``errorStack`` (the traceback of the user's
code) and ``localVars`` (the innermost user frame's locals, repr strings). The
executor is not trusted (user code runs in it): both are checked and bounded here
again, whatever the executor says it bounded, and a local whose name says it
holds a secret is redacted here too.

- A failed subcall's traceback waits on its task's runtime (``rt.child_stacks``,
  at most MAX_PENDING_CHILDREN a task) until the dispatch actor resumes the
  parent with the error: the parent's executor then shows it as the direct cause
  in the parent's own traceback, so a root call's traceback holds the chain.
- A root call's failure that is final (no retry armed) is kept on the runtime
  (``rt.failure``), the first one only: that is the call the dispatcher names in
  the task's failure message ("call <id> (function f) failed ..."), FAST_FAIL or
  CONTINUE alike. ``detail_for`` hands it to the Calls phase's outcome only when
  that message names this very call, so a result never shows another call's
  traceback. The runtime goes with the task, and these with it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from blockx.core.call_ids import task_id_of_call

MAX_TRACEBACK_CHARS = 32 * 1024     # the executor's own cap (executor/blockx_executor/failure.py)
MAX_LOCALS = 20
MAX_LOCAL_NAME = 64
MAX_LOCAL_VALUE = 256
MAX_PENDING_CHILDREN = 64
REDACTED = "<redacted>"
SECRET_NAME = re.compile(r"passw(or)?d|pwd|secret|token|key|credential|auth|cookie|session_?id",
                         re.IGNORECASE)
_SUB = "/sub-"


@dataclass(slots=True)
class FailureDetail:
    """The call that decided a task's failure: its traceback and locals."""
    call_id: str = ""
    traceback: str = ""
    local_vars: list[tuple[str, str]] = field(default_factory=list)   # frame order


def clip(text: str, limit: int) -> str:
    """At most ``limit`` characters, keeping both ends (a traceback's first
    frames and its last line both matter)."""
    if len(text) <= limit:
        return text
    half = limit // 2 - 20
    return f"{text[:half]} ...[{len(text) - 2 * half} chars cut]... {text[-half:]}"


def bounded_stack(value: object) -> str:
    return clip(value, MAX_TRACEBACK_CHARS) if type(value) is str else ""


def bounded_locals(value: object) -> list[tuple[str, str]]:
    if type(value) is not dict:
        return []
    out: list[tuple[str, str]] = []
    for name, text in value.items():
        if len(out) >= MAX_LOCALS:
            break
        if type(name) is not str or type(text) is not str or not name:
            continue
        name = name[:MAX_LOCAL_NAME]
        out.append((name, REDACTED if SECRET_NAME.search(name) else clip(text, MAX_LOCAL_VALUE)))
    return out


def note_call_failed(rt, call_id: str, payload: dict, final: bool) -> None:
    """A CallFailed the dispatcher accepted (``final``: no retry follows)."""
    if rt is None:
        return
    stack = payload.get("errorStack")
    if _SUB in call_id[call_id.rfind("/"):]:          # a subcall: its parent shows it
        if type(stack) is str and stack:
            pending = rt.child_stacks
            if pending is None:
                pending = rt.child_stacks = {}
            if len(pending) >= MAX_PENDING_CHILDREN:
                pending.pop(next(iter(pending)))
            pending[call_id] = bounded_stack(stack)
        return
    if final and rt.failure is None:
        lv = bounded_locals(payload.get("localVars"))
        tb = bounded_stack(stack)
        if tb or lv:
            rt.failure = FailureDetail(call_id, tb, lv)


def take_child_stack(runtimes, child_call_id: str) -> str:
    """The traceback of a failed subcall, for the ResumeCall of its parent ("" when none)."""
    tid = task_id_of_call(child_call_id)
    rt = runtimes.get(tid) if tid is not None else None
    if rt is None or not rt.child_stacks:
        return ""
    return rt.child_stacks.pop(child_call_id, "")


def detail_for(rt, failure_message: str) -> FailureDetail | None:
    """The kept detail when ``failure_message`` names its call, else None."""
    d = rt.failure if rt is not None else None
    if d is None or f"call {d.call_id} (" not in failure_message:
        return None
    return d
