"""The Call Builder contract: a task's FunctionCallConfig payload -> its root calls.

A builder turns the payload bytes into CallSpecs, the calls of the Calls phase, in
the order their outputs will appear in TaskResult.outputs. Arguments leave the
builder already canonical (sorted keys, compact), because they feed the call cache
key and are spliced verbatim into ExecuteCall frames: the hot path never re-encodes.

A streaming builder also implements `prepare_stream`: the Builder phase then only
validates the payload and returns a CallStream, and the Calls phase pulls batches
from it under the credit window (streamBuild.*), so a million-row scan never
materialises its whole call list. `prepare_stream` must do all validation, so a bad
payload still fails in the Builder phase (BUILDER_FAILED), never halfway through
production.

Builders are synchronous and pure: they run on the event loop between awaits, so
they must be quick per call (a batch at a time for streams).

A builder that reads a database cannot be synchronous: an ASYNC streaming builder
implements `open_stream` (a coroutine) instead of `build` / `prepare_stream`. It
validates the payload and opens the scan in the Builder phase (a bad query fails
there, with the database's message) and returns an AsyncCallStream whose batches
the Calls phase awaits under the same credit window. With streamBuild disabled the
orchestrator drains that stream in the Builder phase, up to MAX_EAGER_CALLS."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

import orjson

from blockx.json_types import json_type

from blockx._fast import load as _load

canonical_args_json = _load("cachekey").canonical_args_json


class CallSpec(NamedTuple):
    """One root call: function id and its canonical JSON argument array."""

    function_id: str
    args_json: bytes


class BuilderError(ValueError):
    """The payload is unusable; the message tells the submitter what to fix.
    The task fails with BUILDER_FAILED (not retryable: the same payload fails again)."""

    retryable = False


@dataclass(slots=True)
class BuildContext:
    """What a builder may know about the task it builds for."""

    task_id: str = ""
    instance_id: str = ""
    deadline_ms: int = 0  # absolute task deadline (0 = unknown)


class CallStream(Protocol):
    def batches(self, max_rows: int, max_args_bytes: int) -> Iterator[list[CallSpec]]:
        """Yield the calls in order, in lists of at most max_rows calls whose args
        total at most max_args_bytes (a single larger call forms a batch alone)."""
        ...

    @property
    def total(self) -> int | None:
        """Number of calls the stream will yield, when known up front."""
        ...

    def close(self) -> None:
        """Release resources early (the task ended before the stream was drained)."""
        ...


class AsyncCallStream(Protocol):
    def abatches(self, max_rows: int, max_args_bytes: int) -> AsyncIterator[list[CallSpec]]:
        """Like CallStream.batches, awaited (rows come from a database)."""
        ...

    @property
    def total(self) -> int | None:
        ...

    async def aclose(self) -> None:
        """Release the scan (cursor, transaction, connection); idempotent."""
        ...

    def close(self) -> None:
        """aclose() from synchronous code (it schedules the release); idempotent."""
        ...


@runtime_checkable
class CallBuilder(Protocol):
    name: str

    def build(self, payload: bytes, ctx: Any) -> Sequence[CallSpec]:
        """The task's calls in order: a list of CallSpec, or a PackedCalls
        (blockx/_fast/calllist: the same calls packed in arrays, which the Calls
        phase hands to the dispatcher without a pass per call; callList does)."""
        ...


@runtime_checkable
class StreamingCallBuilder(CallBuilder, Protocol):
    def prepare_stream(self, payload: bytes, ctx: Any) -> CallStream:
        ...


@runtime_checkable
class AsyncStreamingCallBuilder(Protocol):
    name: str

    async def open_stream(self, payload: bytes, ctx: Any) -> AsyncCallStream:
        ...


MAX_EAGER_CALLS = 1_000_000   # calls an async stream may yield when drained in the Builder phase


def is_streaming(builder: Any) -> bool:
    return callable(getattr(builder, "prepare_stream", None)) or is_async_streaming(builder)


def is_async_streaming(builder: Any) -> bool:
    return callable(getattr(builder, "open_stream", None))


# --- helpers shared by the builders ----------------------------------------------


def parse_payload(name: str, payload: bytes | bytearray | memoryview | str | None) -> Any:
    """Decode a payload as JSON, with a message naming the builder."""
    if payload is None or len(payload) == 0:
        raise BuilderError(f"{name}: the payload is empty; expected a JSON object")
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise BuilderError(f"{name}: the payload is not valid JSON ({exc})") from None


def require_object(name: str, data: Any) -> dict:
    if not isinstance(data, dict):
        raise BuilderError(f"{name}: the payload must be a JSON object, got {json_type(data)}")
    return data


MAX_FUNCTION_ID_CHARS = 256   # a FUNCTIONS_DIR file name is at most 255 bytes, an etcd or Redis id 128


def require_function_id(name: str, value: Any, where: str = "functionId") -> str:
    if not isinstance(value, str) or not value:
        if value is None:
            raise BuilderError(f"{name}: {where} is missing; expected a non-empty string")
        raise BuilderError(f"{name}: {where} must be a non-empty string, got {json_type(value)} "
                           f"{_short(value)}")
    if len(value) > MAX_FUNCTION_ID_CHARS:      # data: it reaches messages, logs and traces
        raise BuilderError(f"{name}: {where} {_short(value)} is {len(value)} characters, over the limit "
                           f"of {MAX_FUNCTION_ID_CHARS} (a function id is a file or key name)")
    if value != value.strip() or "/" in value or "\x00" in value:
        raise BuilderError(f"{name}: {where} {value!r} is not a valid function id "
                           "(no slashes, NULs or surrounding spaces)")
    return value


def require_int(name: str, data: dict, key: str, default: int | None = None) -> int:
    value = data.get(key, default)
    if value is None:
        raise BuilderError(f"{name}: {key} is missing; expected an integer")
    if not isinstance(value, int) or isinstance(value, bool):
        raise BuilderError(f"{name}: {key} must be an integer, got {json_type(value)} {_short(value)}")
    return value


def reject_unknown(name: str, data: dict, allowed: tuple[str, ...]) -> None:
    extra = sorted(k for k in data if k not in allowed)
    if extra:
        raise BuilderError(f"{name}: unknown payload key(s) {', '.join(map(repr, extra))} "
                           f"(allowed: {', '.join(allowed)})")


def _short(value: Any) -> str:
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def batch_specs(specs: Iterator[CallSpec], max_rows: int, max_args_bytes: int) -> Iterator[list[CallSpec]]:
    """Cut an ordered CallSpec iterator into batches bounded by rows and arg bytes."""
    if max_rows <= 0:
        raise ValueError("max_rows must be > 0")
    if max_args_bytes <= 0:
        raise ValueError("max_args_bytes must be > 0")
    batch: list[CallSpec] = []
    size = 0
    for spec in specs:
        n = len(spec.args_json)
        if batch and (len(batch) >= max_rows or size + n > max_args_bytes):
            yield batch
            batch = []
            size = 0
        batch.append(spec)
        size += n
    if batch:
        yield batch
