"""The plugin contract: a task's collected outputs -> a side effect + a report.

Names (the one place they are decided; code, docstrings and comments follow):
- **plugin** is the last phase of a task (the Plugin phase: TaskPhase.PLUGIN,
  StartPluginPhase, pluginSlots, plugin_ms) and the thing a task's
  ResultHandler names and that phase runs (``Plugin``, registered by name in
  blockx.plugins.writers.PluginRegistry, reporting a ``PluginResult``);
- **writer** is only a plugin that writes data (tableUpserts, bundleWrite) and
  what exists for writers alone: a streamed write (``StreamingWriterPlugin``,
  ``WriterStream``, blockx.adapters.writer_stream, the writerStream settings);
- **result handler** is only the wire and config name of the task's plugin
  choice (the proto's ``ResultHandler`` / ``result_handler``,
  maxResultHandlerConfigBytes, the CLI's ``--result-handler``).
Text a client or an operator already reads keeps its words: the failure
messages "no writer plugin named ..." / "unknown writer plugin ..." and the
OpenTelemetry phase span ``writer`` with its ``blockx.writer`` attribute.

The Plugin phase runs once per task, after the Calls phase, with the task's
ResultHandler config (JSON bytes) and the outputs (JSON bytes of each successful
root call, in call-list order). A plugin reports with a PluginResult (the
core's record, which the task's result carries, re-exported here); ok=False
fails the task with PLUGIN_FAILED and the message (retryable when the result
says so). ``ctx.io_timeout_ms`` (phaseIoTimeoutMs) bounds each IO operation the
plugin makes; nothing bounds the plugin as a whole but the task deadline, whose
expiry cancels it (a plugin must then leave no write behind it). A plugin that raises is treated
the same way by the orchestrator (the exception text becomes the message).
A task without a ResultHandler runs no plugin.

A writer may also stream (``open_stream``): when the task's builder streams, the
Worker opens one WriterStream before the Calls phase and hands it each settled
batch's outputs, in call-list order, as the task runs (``write``); the Plugin
phase is then ``commit``, which makes every write visible at once (one
transaction, one file renamed into place). A task that fails, times out or is
cancelled gets ``abort`` instead: nothing it wrote is visible, as when the writer
runs after the Calls phase. Two keys of a ResultHandler config belong to the
Worker, not the writer (STREAM_KEYS): ``stream`` (false: run this task's writer
after the Calls phase over every output, the Worker's behaviour without streaming) and ``keepOutputs``
(how many outputs a streamed task keeps in its TaskResult)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import orjson

from blockx.core.types import PluginResult

__all__ = ["STREAM_KEYS", "Plugin", "PluginContext", "PluginError", "PluginResult", "StreamingWriterPlugin",
           "WriterStream", "can_stream", "parse_config", "stream_options"]


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
class Plugin(Protocol):
    name: str

    async def execute(self, config: bytes, outputs: list[bytes], ctx: Any) -> PluginResult:
        ...


class WriterStream(Protocol):
    """One task's streamed write (see the module doc). ``write`` raises PluginError
    (or a data-source error) for rows it refuses; the task then fails and the
    stream is aborted."""

    async def write(self, outputs: list[bytes]) -> None:
        ...

    async def commit(self) -> PluginResult:
        ...

    async def abort(self) -> None:
        ...


@runtime_checkable
class StreamingWriterPlugin(Protocol):
    name: str

    def open_stream(self, config: bytes, ctx: Any) -> WriterStream:
        """A WriterStream for one task; PluginError for a bad config."""
        ...


def can_stream(plugin: Any) -> bool:
    return callable(getattr(plugin, "open_stream", None))


STREAM_KEYS = ("stream", "keepOutputs")


def stream_options(name: str, cfg: dict) -> tuple[bool, int | None]:
    """(stream, keepOutputs or None for the Worker's default) of a parsed config;
    PluginError naming the key for a bad value."""
    stream = cfg.get("stream", True)
    if not isinstance(stream, bool):
        raise PluginError(f"{name}: stream must be true or false")
    keep = cfg.get("keepOutputs")
    if keep is not None and (type(keep) is not int or keep < 0):
        raise PluginError(f"{name}: keepOutputs must be an integer >= 0 (outputs a streamed task keeps "
                          "in its result; 0 keeps none)")
    return stream, keep


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
