"""Turning an exception raised by user code into CallFailed fields.

Rules: errorKind is the `error_kind` of the SDK's exceptions (IOCallError,
SubcallError, BudgetExceeded, CallCancelled, user subclasses of SDKError),
otherwise USER_ERROR; retryable is `bool(exc.retryable)` when the attribute exists, else
False. errorStack is the traceback with the executor's own frames left out (the
call runner above the user's code, the SDK below it), so it reads as the user's
code alone; a chain (`raise ... from`, an exception raised while handling
another) is printed oldest first as Python prints it, and a SubcallError that
carries its child's traceback (relayed by the Worker) shows the child's first,
as the direct cause. localVars are those of the innermost frame that belongs to
user function code (a `<blockx-fn ...>` file), falling back to the innermost
frame at all: repr'd through reprlib (bounded work on big containers), each cut
to MAX_VAR_REPR characters, at most MAX_VARS names; a name that says it holds a
secret (password, token, key, ...) shows REDACTED instead of its value.
Every step tolerates hostile objects (a raising __repr__ / __str__)."""

from __future__ import annotations

import os
import re
import reprlib
import traceback
import types

from .sdk import CallAborted, SDKError, SubcallError

USER_FILE_PREFIX = "<blockx-fn "
MAX_VARS = 20
MAX_VAR_REPR = 200
MAX_MESSAGE = 8 * 1024
MAX_STACK = 32 * 1024
MAX_CHAIN = 8                 # exceptions of one chain printed (cause / context links)
REDACTED = "<redacted>"
# A local whose name says it holds a secret: its value is never shown.
_SECRET_NAME = re.compile(r"passw(or)?d|pwd|secret|token|key|credential|auth|cookie|session_?id",
                          re.IGNORECASE)
CAUSE_LINE = "\nThe above exception was the direct cause of the following exception:\n\n"
CONTEXT_LINE = "\nDuring handling of the above exception, another exception occurred:\n\n"

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))

_repr = reprlib.Repr()
_repr.maxlevel = 3
_repr.maxstring = MAX_VAR_REPR
_repr.maxother = MAX_VAR_REPR
_repr.maxlong = 60
for _attr in ("maxlist", "maxtuple", "maxdict", "maxset", "maxfrozenset", "maxdeque", "maxarray"):
    setattr(_repr, _attr, 20)


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2 - 20
    return f"{text[:half]} ...[{len(text) - 2 * half} chars cut]... {text[-half:]}"


def error_kind_of(exc: BaseException, default: str = "USER_ERROR") -> str:
    """Only the SDK's exception types (and user subclasses of SDKError) choose
    their errorKind: an unrelated `error_kind` attribute on some library's
    exception must not pass for, say, a retryable EXECUTOR_LOST."""
    if not isinstance(exc, (SDKError, CallAborted)):
        return default
    kind = getattr(exc, "error_kind", None)
    return kind if isinstance(kind, str) and kind else default


def retryable_of(exc: BaseException) -> bool:
    try:
        return bool(getattr(exc, "retryable", False))
    except Exception:  # a property that raises, or a __bool__ that does
        return False


def message_of(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception as inner:
        text = f"<str() failed: {type(inner).__name__}>"
    name = type(exc).__name__
    if type(exc) is SubcallError:   # its text already says "subcall ... failed": once is enough
        return clip(text or name, MAX_MESSAGE)
    if isinstance(exc, MemoryError):
        from . import limits
        if limits.memory_limit_mb:
            text = f"{text + ': ' if text else ''}the executor's memory limit ({limits.memory_limit_mb} MB) was reached"
    if isinstance(exc, ModuleNotFoundError) and isinstance(exc.name, str) and exc.name:
        text += (f" (the executors' Python has no package {exc.name.partition('.')[0]!r}: install it into the "
                 "venv of EXECUTOR_PYTHON or into a directory of EXECUTOR_SITE_PACKAGES)")
    return clip(f"{name}: {text}" if text else name, MAX_MESSAGE)


def _is_internal(frame: types.FrameType) -> bool:
    return os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _PKG_DIR


def _user_tb(tb: types.TracebackType | None) -> types.TracebackType | None:
    """Skip the executor's frames at the top of the traceback (the call runner)."""
    while tb is not None and _is_internal(tb.tb_frame) and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def _internal_file(filename: str) -> bool:
    return os.path.dirname(os.path.abspath(filename)) == _PKG_DIR


def _segment(exc: BaseException) -> str:
    """One exception of a chain, as Python prints it, without the executor's frames
    (all of them kept when every frame is the executor's own: its bug shows where)."""
    frames = traceback.extract_tb(exc.__traceback__, limit=-500)   # the innermost 500: where it broke
    user = [f for f in frames if not _internal_file(f.filename)]
    shown = user or frames
    lines = ["Traceback (most recent call last):\n"] + traceback.format_list(shown) if shown else []
    lines.extend(traceback.format_exception_only(type(exc), exc))
    return "".join(lines)


def _child_traceback(exc: BaseException) -> str:
    if not isinstance(exc, SubcallError):
        return ""
    text = getattr(exc, "child_traceback", "")
    return text if isinstance(text, str) else ""


def stack_of(exc: BaseException) -> str:
    try:
        chain: list[BaseException] = []       # newest first
        links: list[str] = []                 # links[i]: between chain[i+1] and chain[i]
        seen: set[int] = set()
        cur: BaseException | None = exc
        while cur is not None and id(cur) not in seen and len(chain) < MAX_CHAIN:
            seen.add(id(cur))
            chain.append(cur)
            if cur.__cause__ is not None:
                links.append(CAUSE_LINE)
                cur = cur.__cause__
            elif cur.__context__ is not None and not cur.__suppress_context__:
                links.append(CONTEXT_LINE)
                cur = cur.__context__
            else:
                cur = None
        parts: list[str] = []
        for i in range(len(chain) - 1, -1, -1):
            e = chain[i]
            child = _child_traceback(e)
            if child:
                parts.append(child.rstrip("\n") + "\n" + CAUSE_LINE)
            parts.append(_segment(e))
            if i > 0:
                parts.append(links[i - 1])
        return clip("".join(parts), MAX_STACK)
    except Exception as inner:  # pragma: no cover - traceback formatting of hostile objects
        return f"<traceback formatting failed: {type(inner).__name__}>"


def _innermost_user_frame(tb: types.TracebackType | None) -> types.FrameType | None:
    user = last = None
    while tb is not None:
        frame = tb.tb_frame
        last = frame
        if frame.f_code.co_filename.startswith(USER_FILE_PREFIX):
            user = frame
        tb = tb.tb_next
    return user if user is not None else last


def safe_repr(value) -> str:
    try:
        text = _repr.repr(value)
    except Exception as inner:
        text = f"<repr() failed: {type(inner).__name__}>"
    return text if len(text) <= MAX_VAR_REPR else text[:MAX_VAR_REPR - 3] + "..."


def local_vars_of(exc: BaseException) -> dict[str, str]:
    frame = _innermost_user_frame(_user_tb(exc.__traceback__))
    if frame is None or _is_internal(frame):
        return {}
    skip: tuple = (types.ModuleType, type)
    if frame.f_code.co_name == "<module>":  # module-level code: its locals are its globals
        skip = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)
    out: dict[str, str] = {}
    for name, value in list(frame.f_locals.items()):
        if name.startswith("__") or isinstance(value, skip):
            continue
        if len(out) >= MAX_VARS:
            break
        out[name] = REDACTED if _SECRET_NAME.search(name) else safe_repr(value)
    return out
