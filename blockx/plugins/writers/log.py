"""log (dev stub): writes a one-line summary of the task's outputs to the Worker log.

Config (all optional): {"maxOutputs": 3, "maxOutputBytes": 200, "level": "info"}.
Details: {"count": n, "bytes": total}."""

from __future__ import annotations

import logging
from typing import Any

import orjson

from blockx.plugins.plugin_api import PluginError, PluginResult, parse_config

NAME = "log"
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "warn": logging.WARNING, "error": logging.ERROR}

logger = logging.getLogger("blockx.plugins.log")


class LogPlugin:
    name = NAME

    def __init__(self, log: logging.Logger | None = None):
        self._log = log or logger

    async def execute(self, config: bytes, outputs: list[bytes], ctx: Any = None) -> PluginResult:
        try:
            cfg = parse_config(NAME, config)
            max_outputs = _int(cfg, "maxOutputs", 3)
            max_bytes = _int(cfg, "maxOutputBytes", 200)
            level_name = cfg.get("level", "info")
            level = _LEVELS.get(level_name) if isinstance(level_name, str) else None
            if level is None:
                raise PluginError(f"{NAME}: level must be one of {', '.join(_LEVELS)}")
        except PluginError as exc:
            return PluginResult(NAME, False, str(exc))
        total = sum(len(o) for o in outputs)
        shown = [_clip(o, max_bytes) for o in outputs[:max_outputs]]
        more = len(outputs) - len(shown)
        task_id = getattr(ctx, "task_id", "") or ""
        self._log.log(level, "task %s: %d output(s), %d bytes: %s%s", task_id, len(outputs), total,
                      ", ".join(shown), f" (+{more} more)" if more > 0 else "")
        details = orjson.dumps({"count": len(outputs), "bytes": total})
        return PluginResult(NAME, True, f"logged {len(outputs)} output(s)", details)


def _int(cfg: dict, key: str, default: int) -> int:
    v = cfg.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise PluginError(f"{NAME}: {key} must be a non-negative integer")
    return v


def _clip(raw: bytes, limit: int) -> str:
    text = bytes(raw[:limit + 1]).decode("utf-8", "replace")
    return text if len(raw) <= limit else text[:limit] + "..."
