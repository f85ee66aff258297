"""payload (dev stub): one call whose single argument is the payload itself.

    {"functionId": "echo", "anything": [1, 2]}  -> echo({"functionId": "echo", "anything": [1, 2]})

The function receives the whole decoded payload object, so a client can hand a
function arbitrary structured input without shaping an argument list."""

from __future__ import annotations

from typing import Any

from blockx.plugins.builder_api import (CallSpec, canonical_args_json, parse_payload,
                                        require_function_id, require_object)

NAME = "payload"


class PayloadBuilder:
    name = NAME

    def build(self, payload: bytes, ctx: Any = None) -> list[CallSpec]:
        data = require_object(NAME, parse_payload(NAME, payload))
        fid = require_function_id(NAME, data.get("functionId"))
        return [CallSpec(fid, canonical_args_json([data]))]
