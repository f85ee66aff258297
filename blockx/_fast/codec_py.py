"""UDS frame codec, pure-Python twin of codec.pyx (test oracle and benchmark baseline).

Wire format: a 4-byte big-endian body length, then the body. The body
is either a JSON envelope object (it starts with '{', as orjson and Go encoders
write it) or, with a binary sidecar, b'BXB1' + 4-byte big-endian JSON length +
JSON + raw sidecar bytes. A body is at most MAX_FRAME_BYTES.

Rules the decoder keeps, identical in both implementations:
- The first byte of a body decides its kind: '{' -> JSON envelope, b'BXB1' ->
  sidecar frame, anything else (including an empty body) -> BadMagic. JSON
  envelopes with leading whitespace are therefore rejected; no encoder we talk
  to writes them. NotAnObject can only come from the JSON part of a BXB1 frame.
- FrameTooLarge is raised as soon as a length prefix is seen, before any of the
  body is buffered. Every other error is raised by the feed() call that
  completes the offending frame; frames decoded earlier in that same call ride
  along on the exception's `.frames`. After an error the decoder stays failed.
- A sidecar frame decodes to (envelope, bytes) even when the sidecar is empty,
  a plain frame to (envelope, None): encode/decode round-trips preserve None vs b"".
- At most one partial frame is ever buffered: bytes of whole frames in a chunk are
  decoded straight from the chunk, so nothing is re-copied per frame.
"""

from __future__ import annotations

import struct

import orjson

from blockx._fast.errors import (
    BadMagic,
    FrameError,
    FrameTooLarge,
    InvalidJson,
    JsonLengthOutOfRange,
    MissingMessageType,
    NotAnObject,
    TruncatedFrame,
)

MAX_FRAME_BYTES = 16 * 1024 * 1024
MAGIC = b"BXB1"

_U32 = struct.Struct(">I")
_pack_u32 = _U32.pack
_unpack_u32 = _U32.unpack_from
_dumps = orjson.dumps
_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError


def _too_large_body(n: int) -> FrameTooLarge:
    return FrameTooLarge(f"frame body of {n} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")


def encode_frame(envelope: dict, sidecar=None) -> bytes:
    """One frame for `envelope` (orjson-encodable; orjson.Fragment values are
    spliced verbatim) with an optional binary sidecar (bytes-like).
    Raises FrameTooLarge when the body would exceed MAX_FRAME_BYTES."""
    body = _dumps(envelope)
    if sidecar is None:
        n = len(body)
        if n > MAX_FRAME_BYTES:
            raise _too_large_body(n)
        return _pack_u32(n) + body
    side_len = memoryview(sidecar).nbytes
    n = 8 + len(body) + side_len
    if n > MAX_FRAME_BYTES:
        raise _too_large_body(n)
    return b"".join((_pack_u32(n), MAGIC, _pack_u32(len(body)), body, sidecar))


def encode_execute_call(call_id: str, task_id: str, function_id: str, digest: str,
                        entry_selector: str, args_json: bytes, parent_call_id: str,
                        budget_ms: int, attempt_seq: int) -> bytes:
    """The ExecuteCall frame of one call, byte for byte what encode_frame gives
    for its envelope (keys in this order, args_json spliced verbatim, requestId
    empty): the dispatcher's per-call send, without building the two dicts.
    Raises FrameTooLarge like encode_frame."""
    return encode_frame({"messageType": "ExecuteCall", "callId": call_id, "requestId": "", "payload": {
        "taskId": task_id, "functionId": function_id, "functionCodeDigest": digest,
        "entrySelector": entry_selector, "args": orjson.Fragment(args_json),
        "parentCallId": parent_call_id, "callBudgetMs": budget_ms, "attemptSeq": attempt_seq}})


def encode_call_completed(call_id: str, task_id: str, attempt_seq: int, output_json: bytes,
                          budget_used_ms: int, started_at_ms: int, duration_ms: int) -> bytes:
    """The CallCompleted frame of one call (the executor's answer), byte for byte
    what encode_frame gives for its envelope (keys in this order, output_json
    spliced verbatim, requestId empty), without building the two dicts. Raises
    FrameTooLarge like encode_frame."""
    return encode_frame({"messageType": "CallCompleted", "callId": call_id, "requestId": "", "payload": {
        "taskId": task_id, "attemptSeq": attempt_seq, "output": orjson.Fragment(output_json),
        "budgetUsedMs": budget_used_ms, "startedAtMs": started_at_ms, "durationMs": duration_ms}})


def encode_resume_result(call_id: str, request_id: str, resume_kind: str, result_json: bytes,
                         budget_used_ms: int) -> bytes:
    """The ResumeCall frame that answers a wait with a result and no sidecar (a
    subcall's output, an IO result): byte for byte what encode_frame gives for
    its envelope (keys in this order, result_json spliced verbatim), without
    building the two dicts. Raises FrameTooLarge like encode_frame."""
    return encode_frame({"messageType": "ResumeCall", "callId": call_id, "requestId": request_id, "payload": {
        "resumeKind": resume_kind, "result": orjson.Fragment(result_json), "budgetUsedMs": budget_used_ms}})


def encode_call_waiting_subcall(call_id: str, request_id: str, task_id: str, attempt_seq: int,
                                function_id: str, args_json: bytes, granted_budget_ms: int,
                                ancestry_json: bytes) -> bytes:
    """The CallWaiting(subcall) frame of a call that asks for a subcall (the
    executor's): byte for byte what encode_frame gives for its envelope (keys in
    this order, args_json and ancestry_json spliced verbatim), without building
    the two dicts. Raises FrameTooLarge like encode_frame."""
    return encode_frame({"messageType": "CallWaiting", "callId": call_id, "requestId": request_id, "payload": {
        "taskId": task_id, "attemptSeq": attempt_seq, "waitKind": "subcall", "functionId": function_id,
        "args": orjson.Fragment(args_json), "grantedBudgetMs": granted_budget_ms,
        "ancestry": orjson.Fragment(ancestry_json)}})


def encode_frames(items) -> bytes:
    """Many frames, back to back, in one buffer: `items` is an iterable of
    (envelope, sidecar-or-None)."""
    parts: list[bytes] = []
    append = parts.append
    for envelope, sidecar in items:
        body = _dumps(envelope)
        if sidecar is None:
            n = len(body)
            if n > MAX_FRAME_BYTES:
                raise _too_large_body(n)
            append(_pack_u32(n))
            append(body)
        else:
            n = 8 + len(body) + memoryview(sidecar).nbytes
            if n > MAX_FRAME_BYTES:
                raise _too_large_body(n)
            append(_pack_u32(n))
            append(MAGIC)
            append(_pack_u32(len(body)))
            append(body)
            append(sidecar)
    return b"".join(parts)


def check_envelope(env) -> None:
    """A decoded envelope names its messageType (a non-empty string), or
    MissingMessageType says what it holds instead. Shared with the compiled codec,
    so both word the error alike."""
    mt = env.get("messageType")
    if type(mt) is not str or not mt:
        if mt is None:
            raise MissingMessageType("envelope has no messageType")
        raise MissingMessageType(
            f"envelope messageType must be a non-empty string, got {type(mt).__name__} {mt!r:.40}")


def _load_json(raw) -> object:
    try:
        return _loads(raw)
    except _JSONDecodeError as exc:
        raise InvalidJson(f"invalid JSON in frame envelope: {exc}") from None


def _decode_body(data: bytes, start: int, n: int):
    """Decode the body data[start:start+n] into (envelope, sidecar-or-None)."""
    if n == 0:
        raise BadMagic("empty frame body; expected '{' (JSON envelope) or b'BXB1' (sidecar frame)")
    first = data[start]
    if first == 0x7B:  # '{'
        env = _load_json(data[start:start + n])
        # A '{'-led valid JSON document is always an object.
        check_envelope(env)
        return env, None
    if n >= 4 and data[start:start + 4] == MAGIC:
        if n < 8:
            raise JsonLengthOutOfRange(
                f"BXB1 frame body of {n} bytes is shorter than its 8-byte header")
        jl = _unpack_u32(data, start + 4)[0]
        if jl > n - 8:
            raise JsonLengthOutOfRange(
                f"BXB1 JSON length {jl} runs past the frame end "
                f"(a {n}-byte body leaves {n - 8} bytes after the header)")
        js = start + 8
        env = _load_json(data[js:js + jl])
        if type(env) is not dict:
            raise NotAnObject(f"frame envelope must be a JSON object, got {json_kind(env)}")
        check_envelope(env)
        return env, data[js + jl:start + n]
    raise BadMagic(
        f"frame body starts with {bytes(data[start:start + min(n, 4)])!r}; "
        "expected '{' (JSON envelope) or b'BXB1' (sidecar frame)")


def json_kind(value) -> str:
    """The JSON name of a decoded non-object value, for the not-an-object error
    (shared with the compiled codec)."""
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return "number"


class FrameDecoder:
    """Incremental decoder: feed() it arbitrary chunks of the byte stream; it
    returns [(envelope, sidecar-or-None), ...] for every frame completed by the
    chunk and keeps the rest (at most one partial frame)."""

    __slots__ = ("_buf", "_error")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._error: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held back."""
        return len(self._buf)

    @property
    def failed(self) -> bool:
        return self._error is not None

    def feed(self, data) -> list:
        err = self._error
        if err is not None:
            raise type(err)(str(err))
        if type(data) is not bytes:
            data = bytes(data)
        out: list = []
        try:
            self._feed(data, out)
        except FrameError as exc:
            exc.frames = out
            self._error = exc
            self._buf = bytearray()
            raise
        return out

    def _feed(self, data: bytes, out: list) -> None:
        size = len(data)
        off = 0
        buf = self._buf
        if buf:
            have = len(buf)
            if have < 4:
                take = min(4 - have, size)
                buf += data[:take]
                off = take
                if len(buf) < 4:
                    return
                n = _unpack_u32(buf, 0)[0]
                if n > MAX_FRAME_BYTES:
                    raise FrameTooLarge(
                        f"frame length {n} exceeds the {MAX_FRAME_BYTES}-byte limit")
            else:
                n = _unpack_u32(buf, 0)[0]
            need = 4 + n - len(buf)
            if size - off < need:
                buf += data[off:]
                return
            buf += data[off:off + need]
            off += need
            body = bytes(buf)
            buf.clear()
            out.append(_decode_body(body, 4, n))
        while size - off >= 4:
            n = _unpack_u32(data, off)[0]
            if n > MAX_FRAME_BYTES:
                raise FrameTooLarge(f"frame length {n} exceeds the {MAX_FRAME_BYTES}-byte limit")
            if size - off - 4 < n:
                break
            out.append(_decode_body(data, off + 4, n))
            off += 4 + n
        if off < size:
            buf += data[off:]

    def eof(self) -> None:
        """The stream ended: raise TruncatedFrame if a frame was cut off."""
        if self._error is not None:
            return
        have = len(self._buf)
        if have:
            if have < 4:
                msg = f"stream ended inside a frame length prefix ({have} of 4 bytes)"
            else:
                n = _unpack_u32(self._buf, 0)[0]
                msg = f"stream ended inside a frame ({have - 4} of {n} body bytes received)"
            self._error = TruncatedFrame(msg)
            self._buf = bytearray()
            raise TruncatedFrame(msg)


__all__ = ["MAX_FRAME_BYTES", "MAGIC", "encode_frame", "encode_frames", "encode_execute_call",
           "encode_call_completed", "encode_resume_result",
           "encode_call_waiting_subcall", "FrameDecoder"]
