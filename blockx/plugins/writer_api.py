"""The Writer Plugin contract: a task's collected outputs -> a side effect + a report.

The Plugin phase runs once per task, after the Calls phase, with the task's
ResultHandler config (JSON bytes) and the outputs (JSON bytes of each successful
root call, in call-list order). A plugin reports with a PluginResult; ok=False
fails the task with PLUGIN_FAILED and the message (retryable when the result
says so). ``ctx.io_timeout_ms`` (phaseIoTimeoutMs) bounds each IO operation the
plugin makes; nothing bounds the plugin as a whole but the task deadline, whose
expiry cancels it (a plugin must then leave no write behind it). A plugin that raises is treated
the same way by the orchestrator (the exception text becomes the message).
A task without a ResultHandler runs no plugin."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import orjson


@dataclass(slots=True, frozen=True)
class PluginResult:
    plugin: str
    ok: bool
    message: str = ""
    details: bytes = b""
    retryable: bool = False     # a failure that may pass on a retry (a transient database error)


class PluginError(RuntimeError):
    """A plugin could not do its work; the task fails with PLUGIN_FAILED."""

    retryable = False


@dataclass(slots=True)
class PluginContext:
    task_id: str = ""
    instance_id: str = ""
    deadline_ms: int = 0
    # phaseIoTimeoutMs: the bound of each IO operation (a statement, a batch, a
    # file); 0 = none. The whole plugin run is bounded by the task deadline.
    io_timeout_ms: int = 0


@runtime_checkable
class WriterPlugin(Protocol):
    name: str

    async def execute(self, config: bytes, outputs: list[bytes], ctx: Any) -> PluginResult:
        ...


def parse_config(name: str, config: bytes | None) -> dict:
    """A ResultHandler config as a JSON object; empty means {}."""
    if config is None or len(config) == 0:
        return {}
    try:
        data = orjson.loads(config)
    except orjson.JSONDecodeError as exc:
        raise PluginError(f"{name}: the result handler config is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise PluginError(f"{name}: the result handler config must be a JSON object")
    return data
