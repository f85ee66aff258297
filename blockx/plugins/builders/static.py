"""static (dev stub): the same call repeated a fixed number of times.

    {"functionId": "add1", "count": 3, "args": [41]}   -> add1(41) x 3

"count" defaults to 1 and "args" to []. The calls are identical, so they share one
cache key: the stub exercises the per-task call cache and singleflight."""

from __future__ import annotations

from typing import Any

from blockx.plugins.builder_api import (BuilderError, CallSpec, canonical_args_json, json_type,
                                        parse_payload, reject_unknown, require_function_id,
                                        require_int, require_object)

NAME = "static"
MAX_COUNT = 1_000_000


class StaticBuilder:
    name = NAME

    def build(self, payload: bytes, ctx: Any = None) -> list[CallSpec]:
        data = require_object(NAME, parse_payload(NAME, payload))
        reject_unknown(NAME, data, ("functionId", "count", "args"))
        fid = require_function_id(NAME, data.get("functionId"))
        count = require_int(NAME, data, "count", 1)
        if not 0 <= count <= MAX_COUNT:
            raise BuilderError(f"{NAME}: count must be between 0 and {MAX_COUNT}, got {count}")
        args = data.get("args", [])
        if not isinstance(args, list):
            raise BuilderError(f"{NAME}: args must be an array, got {json_type(args)}")
        spec = CallSpec(fid, canonical_args_json(args))
        return [spec] * count
