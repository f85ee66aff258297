"""test (dev stub): a controllable plugin for tests and smoke checks.

Config (all optional):
  {"fail": true, "message": "..."}   report failure with that message
  {"raise": true, "message": "..."}  raise PluginError (an exception path)
  {"sleepMs": 50}                    take that long (drain / timeout tests)
  {"expectCount": 3}                 fail unless exactly that many outputs arrived
Otherwise ok, with details {"count": n, "digest": sha256 hex over the outputs},
where each output is length-prefixed (8-byte big-endian) so boundaries count."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import orjson

from blockx.plugins.plugin_api import PluginError, PluginResult, parse_config

NAME = "test"
MAX_SLEEP_MS = 600_000


def outputs_digest(outputs: list[bytes]) -> str:
    h = hashlib.sha256()
    for o in outputs:
        h.update(len(o).to_bytes(8, "big"))
        h.update(o)
    return h.hexdigest()


class TestPlugin:
    __test__ = False  # not a pytest test class
    name = NAME

    async def execute(self, config: bytes, outputs: list[bytes], ctx: Any = None) -> PluginResult:
        try:
            cfg = parse_config(NAME, config)
        except PluginError as exc:
            return PluginResult(NAME, False, str(exc))
        message = cfg.get("message", "")
        if not isinstance(message, str):
            return PluginResult(NAME, False, f"{NAME}: message must be a string")
        sleep_ms = cfg.get("sleepMs", 0)
        if not isinstance(sleep_ms, int) or isinstance(sleep_ms, bool) or not 0 <= sleep_ms <= MAX_SLEEP_MS:
            return PluginResult(NAME, False, f"{NAME}: sleepMs must be an integer between 0 and {MAX_SLEEP_MS}")
        if sleep_ms:
            await asyncio.sleep(sleep_ms / 1000)
        if cfg.get("raise") is True:
            raise PluginError(message or f"{NAME}: raised as configured")
        if cfg.get("fail") is True:
            return PluginResult(NAME, False, message or f"{NAME}: failed as configured")
        details = orjson.dumps({"count": len(outputs), "digest": outputs_digest(outputs)})
        expect = cfg.get("expectCount")
        if expect is not None and expect != len(outputs):
            return PluginResult(NAME, False, f"{NAME}: expected {expect} output(s), got {len(outputs)}", details)
        return PluginResult(NAME, True, message or f"{len(outputs)} output(s)", details)
