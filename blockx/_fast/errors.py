"""Errors raised by the UDS frame codec and the write outbox.

Plain Python (not compiled) so the Cython modules and their pure-Python twins
raise the very same classes, and callers can `except FrameError` without caring
which implementation is loaded.

Every FrameError means the byte stream can no longer be trusted: the decoder that
raised it stays failed and the connection must be closed. `frames` holds the
complete, valid frames that the failing `feed()` call decoded before it met the
bad one, so a caller can still act on them (e.g. a CallCompleted that arrived in
the same chunk as garbage) before closing."""

from __future__ import annotations


class FrameError(ValueError):
    """A frame on the UDS stream is malformed; the stream is unusable after it."""

    retryable = False

    def __init__(self, message: str, frames: list | None = None) -> None:
        super().__init__(message)
        self.frames: list = frames if frames is not None else []

    def __reduce__(self):
        return (type(self), (self.args[0], self.frames))


class FrameTooLarge(FrameError):
    """The length prefix (or an encoder's output) exceeds MAX_FRAME_BYTES."""


class BadMagic(FrameError):
    """The body starts neither with '{' (JSON envelope) nor with b'BXB1' (sidecar frame)."""


class JsonLengthOutOfRange(FrameError):
    """A BXB1 body is shorter than its 8-byte header, or its JSON length runs past the frame."""


class InvalidJson(FrameError):
    """The envelope bytes are not valid JSON (or not UTF-8)."""


class NotAnObject(FrameError):
    """The envelope is valid JSON but not a JSON object."""


class MissingMessageType(FrameError):
    """The envelope object has no non-empty string `messageType`."""


class TruncatedFrame(FrameError):
    """The stream ended (FrameDecoder.eof) in the middle of a frame."""


class OutboxFull(Exception):
    """The connection's outbox already holds `depth` frames; retry later or elsewhere."""

    retryable = True


class OutboxClosed(ConnectionError):
    """The outbox was closed (connection lost or shut down); the frame was not sent."""

    retryable = True


class ProtocolError(ValueError):
    """A well-framed message whose envelope or payload breaks the UDS message contract
    (unknown messageType, missing required key, wrong value type)."""

    retryable = False


__all__ = [
    "FrameError", "FrameTooLarge", "BadMagic", "JsonLengthOutOfRange", "InvalidJson",
    "NotAnObject", "MissingMessageType", "TruncatedFrame", "OutboxFull", "OutboxClosed",
    "ProtocolError",
]
