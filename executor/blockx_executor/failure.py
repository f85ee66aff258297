"""Turning an exception raised by user code into CallFailed fields.

Rules: errorKind is the `error_kind` of the SDK's exceptions (IOCallError,
SubcallError, BudgetExceeded, CallCancelled, user subclasses of SDKError),
otherwise USER_ERROR; retryable is `bool(exc.retryable)` when the attribute exists, else
False. errorStack is the traceback with the executor's own frames cut from the
top, so it starts at the user's code. localVars are those of the innermost frame
that belongs to user function code (a `<blockx-fn ...>` file), falling back to
the innermost frame at all: repr'd through reprlib (bounded work on big
containers), each cut to MAX_VAR_REPR characters, at most MAX_VARS names.
Every step tolerates hostile objects (a raising __repr__ / __str__)."""

from __future__ import annotations

import os
import reprlib
import traceback
import types

from .sdk import CallAborted, SDKError

USER_FILE_PREFIX = "<blockx-fn "
MAX_VARS = 20
MAX_VAR_REPR = 200
MAX_MESSAGE = 8 * 1024
MAX_STACK = 32 * 1024

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


def stack_of(exc: BaseException) -> str:
    try:
        lines = traceback.format_exception(type(exc), exc, _user_tb(exc.__traceback__))
        return clip("".join(lines), MAX_STACK)
    except Exception as inner:  # pragma: no cover - traceback formatting of hostile objects
        return f"<traceback formatting failed: {type(inner).__name__}: {inner}>"


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
        out[name] = safe_repr(value)
    return out
