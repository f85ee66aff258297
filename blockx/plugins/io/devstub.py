"""devstub: a deterministic in-process backend for tests and examples.

The request is a JSON object with an "op":
  echo   -> the request bytes unchanged, and the body unchanged
  upper  -> {"op": "upper", "bytes": n}, with the binary body upper-cased
  sleep  -> waits "ms" milliseconds (0..60000), then {"slept": ms}
  fail   -> IOBackendError("message", retryable = "retryable")
  count  -> {"count": n}: requests this backend instance has served (including
            this one); shows per-task caching, since a cached repeat returns the
            same n
Anything else is an IOBackendError naming the known ops."""

from __future__ import annotations

import asyncio

import orjson

from blockx.core.config_rules import Rule
from blockx.plugins.io.errors import IOBackendError

# The rules of the ioBackends.devstub settings.
DEVSTUB_RULES = (Rule("concurrency", 1), Rule("timeout_ms", 0, note="0 = phaseIoTimeoutMs"))

NAME = "devstub"
MAX_SLEEP_MS = 60_000
OPS = ("echo", "upper", "sleep", "fail", "count")


class DevStubBackend:
    name = NAME

    def __init__(self) -> None:
        self.served = 0

    def request_now(self, request_json: bytes, body: bytes | None) -> tuple[bytes, bytes | None] | None:
        """Every op but "sleep" answers synchronously (TaskIOScope.handle_now serves
        those without a Task); None for "sleep", which must await request()."""
        try:
            req = orjson.loads(request_json)
        except orjson.JSONDecodeError as exc:
            self.served += 1
            raise IOBackendError(f"devstub: request is not valid JSON ({exc})") from None
        if type(req) is dict and req.get("op") == "sleep":
            return None
        self.served += 1
        if not isinstance(req, dict):
            raise IOBackendError("devstub: request must be a JSON object with an \"op\"")
        op = req.get("op")
        if op == "echo":
            return bytes(request_json), body
        if op == "upper":
            if body is None:
                raise IOBackendError("devstub: op \"upper\" needs a binary body")
            return orjson.dumps({"op": "upper", "bytes": len(body)}), bytes(body).upper()
        if op == "fail":
            message = req.get("message", "devstub: failed as requested")
            raise IOBackendError(str(message), retryable=req.get("retryable") is True)
        if op == "count":
            return orjson.dumps({"count": self.served}), None
        raise IOBackendError(f"devstub: unknown op {op!r} (known: {', '.join(OPS)})")

    async def request(self, request_json: bytes, body: bytes | None) -> tuple[bytes, bytes | None]:
        out = self.request_now(request_json, body)
        if out is not None:
            return out
        self.served += 1        # "sleep"
        ms = orjson.loads(request_json).get("ms", 0)
        if not isinstance(ms, int) or isinstance(ms, bool) or not 0 <= ms <= MAX_SLEEP_MS:
            raise IOBackendError(f"devstub: sleep \"ms\" must be an integer between 0 and {MAX_SLEEP_MS}")
        await asyncio.sleep(ms / 1000)
        return orjson.dumps({"slept": ms}), None

    async def close(self) -> None:
        return None
