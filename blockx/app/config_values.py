"""Converting one configuration value to its field's type.

A JSON value must already have the field's JSON type (no silent coercion of
"10" to 10); an environment value is text and is parsed: integers in base 10
within int64, booleans as true/false, 1/0, t/f, yes/no, y/n or on/off (any case),
Go durations (blockx.app.duration) for fields marked env_kind="duration", and
etcdEndpoints as a comma-separated list where a lone "none" means no etcd, and
dataSources as a JSON object of strings.
Each failure is a ValueError whose text names what was wrong; the caller adds
where the value came from."""

from __future__ import annotations

import json
import math
from typing import Any

from blockx.app.duration import DurationError, parse_duration_ms
from blockx.json_types import json_type as _json_type

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)

_TRUE = {"1", "t", "true", "yes", "y", "on"}
_FALSE = {"0", "f", "false", "no", "n", "off"}


def _type_name(t: Any) -> str:
    return {int: "an integer", bool: "a boolean", str: "a string", float: "a number",
            dict[str, str]: "an object of strings", dict[str, dict]: "an object of objects"}.get(t, "a list of strings")


def json_value(path: str, t: Any, value: Any) -> Any:
    """Convert a JSON value for field type t; raise ValueError with the reason."""
    if t is bool:
        if isinstance(value, bool):
            return value
    elif t is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if not INT64_MIN <= value <= INT64_MAX:
                raise ValueError(f"{path}: {value} is out of the 64-bit integer range")
            return value
    elif t is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(float(value)):
                raise ValueError(f"{path}: must be a finite number")
            return float(value)
    elif t is str:
        if isinstance(value, str):
            return value
    elif t == dict[str, str]:  # dataSources: {"name": "url", ...}
        if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
            return dict(value)
    elif t == dict[str, dict]:  # ioBackends.rpc.endpoints: {"name": {...}, ...}, checked by config_checks
        if isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
            return json.loads(json.dumps(value))
    else:  # list[str]: etcdEndpoints accepts a list or a comma-separated string
        if isinstance(value, str):
            return _endpoints(value)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return _endpoints(",".join(value))
    raise ValueError(f"{path}: expected {_type_name(t)}, got {_json_type(value)} {json.dumps(value)[:60]}")


def _endpoints(text: str) -> list[str]:
    items = [p.strip() for p in text.split(",")]
    items = [p for p in items if p]
    if len(items) == 1 and items[0].lower() == "none":
        return []
    return items


def parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in _TRUE:
        return True
    if t in _FALSE:
        return False
    raise ValueError(f"{text!r} is not a boolean (use true/false, 1/0, yes/no, on/off)")


def parse_int(text: str) -> int:
    t = text.strip()
    body = t[1:] if t[:1] in "+-" else t
    if not body or not body.isascii() or not body.isdigit():
        raise ValueError(f"{text!r} is not an integer")
    value = int(t, 10)
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{text!r} is out of the 64-bit integer range")
    return value


def parse_float(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


def env_value(t: Any, kind: str | None, text: str) -> Any:
    """Parse the text of an environment variable for field type t."""
    if kind == "duration":
        try:
            return parse_duration_ms(text.strip())
        except DurationError as exc:
            raise ValueError(f"{text!r} is not a Go duration: {exc.reason}") from None
    if t is bool:
        return parse_bool(text)
    if t is int:
        return parse_int(text)
    if t is float:
        return parse_float(text)
    if t is str:
        return text.strip()
    if t == dict[str, str]:
        return _string_object(text)
    if t == dict[str, dict]:
        return _object_of_objects(text)
    return _endpoints(text)


def _string_object(text: str) -> dict[str, str]:
    """A JSON object of strings from an environment variable (BLOCKX_DATA_SOURCES)."""
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise ValueError(f"is not valid JSON ({exc.args[0] if exc.args else exc})") from None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"expected a JSON object of strings, got {_json_type(value)}")
    return value


def _object_of_objects(text: str) -> dict[str, dict]:
    """A JSON object of objects from an environment variable (RPC_ENDPOINTS)."""
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise ValueError(f"is not valid JSON ({exc.args[0] if exc.args else exc})") from None
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise ValueError(f"expected a JSON object of objects, got {_json_type(value)}")
    return value
