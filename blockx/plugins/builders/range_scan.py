"""rangeScan: a streaming builder, one call per integer of a range.

    {"functionId": "square", "start": 0, "stop": 1000000, "step": 1}  -> square(i) for i in range(...)

Semantics are Python's range (stop excluded, negative steps allowed, step != 0).
With streamBuild enabled the calls are produced lazily in batches; without it the
whole list is built at once, which is refused above MAX_EAGER_CALLS with a message
pointing at STREAM_BUILD_ENABLED, rather than exhausting the Worker's memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from blockx.plugins.builder_api import (BuilderError, CallSpec, parse_payload, reject_unknown,
                                        require_function_id, require_int, require_object)

NAME = "rangeScan"
MAX_EAGER_CALLS = 1_000_000
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _args(i: int) -> bytes:
    # canonical_args_json([i]) for an int, without the encoder round trip
    return b"[%d]" % i


class RangeStream:
    """The lazily produced calls of one rangeScan task."""

    __slots__ = ("function_id", "range", "_closed")

    def __init__(self, function_id: str, r: range):
        self.function_id = function_id
        self.range = r
        self._closed = False

    @property
    def total(self) -> int:
        return len(self.range)

    def close(self) -> None:
        self._closed = True

    def batches(self, max_rows: int, max_args_bytes: int) -> Iterator[list[CallSpec]]:
        if max_rows <= 0 or max_args_bytes <= 0:
            raise ValueError("max_rows and max_args_bytes must be > 0")
        fid = self.function_id
        r = self.range
        pos, end = 0, len(r)
        while pos < end and not self._closed:
            # Rows are at most 22 bytes ("[-9223372036854775808]"), so a byte-bounded
            # batch is computed from the row cap; exact sizes only matter near the cap.
            rows = min(max_rows, end - pos, max(1, max_args_bytes // 22))
            batch = [CallSpec(fid, _args(i)) for i in r[pos:pos + rows]]
            pos += rows
            yield batch


class RangeScanBuilder:
    name = NAME

    def _parse(self, payload: bytes) -> RangeStream:
        data = require_object(NAME, parse_payload(NAME, payload))
        reject_unknown(NAME, data, ("functionId", "start", "stop", "step"))
        fid = require_function_id(NAME, data.get("functionId"))
        start = require_int(NAME, data, "start")
        stop = require_int(NAME, data, "stop")
        step = require_int(NAME, data, "step", 1)
        if step == 0:
            raise BuilderError(f"{NAME}: step must not be 0")
        for key, v in (("start", start), ("stop", stop), ("step", step)):
            if not _INT64[0] <= v <= _INT64[1]:
                raise BuilderError(f"{NAME}: {key} {v} is out of the 64-bit integer range")
        return RangeStream(fid, range(start, stop, step))

    def prepare_stream(self, payload: bytes, ctx: Any = None) -> RangeStream:
        return self._parse(payload)

    def build(self, payload: bytes, ctx: Any = None) -> list[CallSpec]:
        stream = self._parse(payload)
        n = stream.total
        if n > MAX_EAGER_CALLS:
            raise BuilderError(f"{NAME}: {n} calls is more than {MAX_EAGER_CALLS} built at once; "
                               "enable streaming build (STREAM_BUILD_ENABLED=true) or split the range")
        fid = stream.function_id
        return [CallSpec(fid, _args(i)) for i in stream.range]
