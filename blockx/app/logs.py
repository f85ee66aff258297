"""Structured logging: one JSON object per line on stderr.

Every line carries `ts` (RFC 3339 UTC, milliseconds), `level`, `logger` and `msg`,
then the record's structured fields at the top level. Fields come from
`extra={"fields": {...}}` or from `log_event(logger, "task_finished", **fields)`
(blockx.log_event), which also sets `event`. A field whose name collides with one of the fixed keys
is kept under `field.<name>` rather than silently overwriting it.

Logging must never take the Worker down: values orjson cannot encode are
converted (protobuf messages to dicts, bytes decoded, sets to lists, anything
else to its repr) and, should encoding still fail, a minimal line with the
error is written instead of raising.

No line carries a secret that blockx.redaction recognises (a URL's password or
secret query parameter, a Bearer token): the encoded line is redacted whole.

With ``batched=True`` (the Worker's setting) the lines logged during one
iteration of the event loop go out in one write and one flush (a task's
``task_finished`` line no longer costs a write syscall of its own); lines from
other threads are written at once, and ``flush()`` / exit write what is pending.

`RateLimiter` keeps a failure that repeats every 200 ms (etcd down, an executor
flapping) from flooding the log: the first occurrence is logged at once, then at
most one line per interval carrying how many were suppressed meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Mapping
from typing import IO, Any

import orjson

from blockx.redaction import redact_text

__all__ = ["JsonFormatter", "RateLimiter", "parse_level", "setup_logging"]

RESERVED = ("ts", "level", "logger", "msg", "event", "exc", "stack")
_RESERVED_KEYS = frozenset(RESERVED)
_STR_ONLY = {str}
_OPTS = orjson.OPT_NON_STR_KEYS
_LEVEL_ALIASES = {"warn": "WARNING", "fatal": "CRITICAL", "trace": "DEBUG"}
_HANDLER_MARK = "_blockx_json_handler"


def parse_level(level: str | int) -> int:
    """'info', 'WARN', 'debug', 20 -> a logging level; a clear error otherwise."""
    if isinstance(level, bool):
        raise ValueError(f"invalid log level {level!r}")
    if isinstance(level, int):
        return level
    name = str(level).strip()
    name = _LEVEL_ALIASES.get(name.lower(), name.upper())
    value = logging.getLevelName(name)
    if not isinstance(value, int):
        raise ValueError(
            f"invalid log level {level!r}: use one of debug, info, warning, error, critical")
    return value


def _default(obj: Any) -> Any:
    # Called by orjson for anything it cannot encode natively.
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj).decode("utf-8", "backslashreplace")
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    if hasattr(obj, "DESCRIPTOR") and hasattr(obj, "ListFields"):
        try:
            return _proto_to_dict(obj)
        except Exception:  # noqa: BLE001 - fall through to repr
            pass
    try:
        return repr(obj)
    except Exception as exc:  # noqa: BLE001 - a broken __repr__ must not break logging
        return f"<unrepresentable {type(obj).__name__}: {type(exc).__name__}>"


def _proto_to_dict(msg: Any) -> dict:
    # Every field, zero values included, ints kept as JSON numbers (MessageToDict
    # would drop zeros and quote int64s): a TaskStatistic must read as numbers.
    out: dict[str, Any] = {}
    for f in msg.DESCRIPTOR.fields:
        value = getattr(msg, f.name)
        if f.message_type is not None:
            if _is_repeated(f):
                if f.message_type.GetOptions().map_entry:
                    value = dict(value)
                else:
                    value = [_proto_to_dict(v) for v in value]
            elif not msg.HasField(f.name):
                continue
            else:
                value = _proto_to_dict(value)
        elif _is_repeated(f):
            value = list(value)
        out[f.json_name] = value
    return out


def _is_repeated(field: Any) -> bool:
    repeated = getattr(field, "is_repeated", None)
    if repeated is not None:
        return bool(repeated)
    return field.label == field.LABEL_REPEATED


# The last whole second formatted and its text, one tuple (replaced whole, so a
# thread never reads one second with another's text): strftime once per second.
_second: tuple[int, str] = (-1, "")


_MS_SUFFIX = tuple(f".{ms:03d}Z" for ms in range(1000))    # a lookup instead of a format per line


def _iso_ms(created: float) -> str:
    global _second
    secs = int(created)
    ms = int((created - secs) * 1000)
    last = _second
    if last[0] != secs:
        last = _second = (secs, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)))
    return last[1] + (_MS_SUFFIX[ms] if 0 <= ms < 1000 else f".{ms:03d}Z")


class JsonFormatter(logging.Formatter):
    """Formats a LogRecord as one JSON line (no trailing newline)."""

    def __init__(self, static_fields: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self._static = dict(static_fields or {})

    def format(self, record: logging.LogRecord) -> str:
        try:
            return self._format(record)
        except Exception as exc:  # noqa: BLE001 - never raise out of logging
            fallback = {
                "ts": _iso_ms(getattr(record, "created", time.time())),
                "level": getattr(record, "levelname", "ERROR").lower(),
                "logger": getattr(record, "name", "?"),
                "msg": _safe_str(getattr(record, "msg", "")),
                "log_error": f"{type(exc).__name__}: {exc}",
            }
            return redact_text(orjson.dumps(fallback, default=_safe_str).decode())

    def _format(self, record: logging.LogRecord) -> str:
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 - bad %-args
            msg = f"{_safe_str(record.msg)} {_safe_str(record.args)}"
        out: dict[str, Any] = {
            "ts": _iso_ms(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": msg,
        }
        event = getattr(record, "event", None)
        if event is not None:
            out["event"] = event
        for source in (self._static, getattr(record, "fields", None)):
            if not source:
                continue
            if type(source) is dict and _RESERVED_KEYS.isdisjoint(source) and {*map(type, source)} == _STR_ONLY:
                out.update(source)       # every key a plain str and none reserved: the loop below, in C
                continue
            if not isinstance(source, Mapping):
                out["field.fields"] = source
                continue
            for key, value in source.items():
                key = key if isinstance(key, str) else _safe_str(key)
                out[f"field.{key}" if key in RESERVED else key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        try:
            line = orjson.dumps(out, default=_default, option=_OPTS).decode()
        except TypeError:
            # e.g. an int beyond 64 bits or a cyclic structure: degrade value by value.
            safe = {k: _encodable(v) for k, v in out.items()}
            line = orjson.dumps(safe, default=_default, option=_OPTS).decode()
        # A URL's password or key, a Bearer token, wherever in the line they came from
        # (a message, a field, an exception): one place, one substring test per line.
        return redact_text(line)


def _encodable(value: Any) -> Any:
    try:
        orjson.dumps(value, default=_default, option=_OPTS)
        return value
    except TypeError:
        return _safe_str(value)


def _safe_str(value: Any) -> str:
    try:
        return value if isinstance(value, str) else repr(value)
    except Exception:  # noqa: BLE001
        return f"<unrepresentable {type(value).__name__}>"


class _SafeStreamHandler(logging.StreamHandler):
    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging API
        # A closed or broken stderr must not print tracebacks per record.
        pass


class _LoopBatchedStreamHandler(_SafeStreamHandler):
    """Lines logged on a thread running an asyncio loop are written together,
    one write and one flush per loop iteration; lines from other threads (or with
    no loop) are written at once."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(stream)
        self._pending: list[str] = []
        self._scheduled = False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or loop.is_closed():
            super().emit(record)
            return
        try:
            line = self.format(record)
        except Exception:  # noqa: BLE001 - never raise out of logging
            self.handleError(record)
            return
        self._pending.append(line)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._write_pending)

    def _write_pending(self) -> None:
        self._scheduled = False
        lines, self._pending = self._pending, []
        if not lines:
            return
        assert self.lock is not None      # logging.Handler.__init__ created it
        with self.lock:
            try:
                self.stream.write("\n".join(lines) + "\n")
                self.stream.flush()
            except Exception:  # noqa: BLE001 - a closed or broken stderr must not raise here
                pass

    def flush(self) -> None:
        self._write_pending()
        super().flush()


def setup_logging(level: str | int = "info", *, stream: IO[str] | None = None,
                  static_fields: Mapping[str, Any] | None = None, batched: bool = False,
                  lean_records: bool = False) -> logging.Handler:
    """Route the root logger to JSON lines on `stream` (stderr by default).

    Idempotent: a second call replaces the handler the first installed, so tests
    and `blockx serve` can both call it. Returns the installed handler.

    ``lean_records`` (the Worker's setting, for a process whose only log output is
    this handler): records no longer collect the thread and process ids and names,
    which the JSON line never shows (the standard logging module's own switches,
    process-wide).
    """
    lvl = parse_level(level)
    if lean_records:
        logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, _HANDLER_MARK, False):
            root.removeHandler(h)
            h.close()
    out = stream if stream is not None else sys.stderr
    handler = _LoopBatchedStreamHandler(out) if batched else _SafeStreamHandler(out)
    setattr(handler, _HANDLER_MARK, True)
    handler.setFormatter(JsonFormatter(static_fields))
    root.addHandler(handler)
    root.setLevel(lvl)
    logging.captureWarnings(True)
    return handler


class RateLimiter:
    """Allows one event per `interval_s` per key; counts what it suppressed.

    `check(key)` returns None when the caller should stay quiet, otherwise the
    number of occurrences suppressed since the last allowed one (0 the first time).
    """

    def __init__(self, interval_s: float = 5.0, clock=time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def check(self, key: str = "") -> int | None:
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return None
        self._last[key] = now
        return self._suppressed.pop(key, 0)

    def reset(self, key: str = "") -> int:
        """Forget `key` (the condition cleared); returns the suppressed count."""
        self._last.pop(key, None)
        return self._suppressed.pop(key, 0)
