"""The request of an IO backend call: one JSON object with a fixed set of keys.

Every backend reads its request through ``request_object``, so a request that
is not JSON, not an object, or carries a key the backend does not know gets the
same error, naming the backend and the keys it allows (a payload can never
smuggle in a setting the backend takes from the Worker's config)."""
from __future__ import annotations

from typing import Any

import orjson

from blockx.json_types import json_type
from blockx.plugins.io.errors import IOBackendError


def request_object(backend: str, request_json: bytes, keys: tuple[str, ...]) -> dict[str, Any]:
    try:
        req = orjson.loads(request_json)
    except orjson.JSONDecodeError as exc:
        raise IOBackendError(f"{backend}: request is not valid JSON ({exc})") from None
    if not isinstance(req, dict):
        raise IOBackendError(f"{backend}: request must be a JSON object, got {json_type(req)}")
    extra = sorted(k for k in req if k not in keys)
    if extra:
        raise IOBackendError(f"{backend}: unknown request key(s) {', '.join(map(repr, extra))} "
                             f"(allowed: {', '.join(keys)})")
    return req


__all__ = ["request_object"]
