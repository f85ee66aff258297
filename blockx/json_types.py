"""`json_type(value)`: the JSON name of a decoded value's type, for error messages
that tell a person what they wrote ("expected an integer, got string")."""
from __future__ import annotations

from typing import Any


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
