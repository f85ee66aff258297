"""BatchSender: the ExecuteCalls queued for one executor in one loop iteration
leave as ONE ExecuteCallBatch frame (negotiated; messages.EXECUTE_CALL_BATCH).

Theory of operation:
- Only for a connection whose executor listed FEATURE_EXECUTE_CALL_BATCH in the
  Heartbeat that attached it, and only when the adapter has batching on; every
  other connection gets single ExecuteCall frames.
- The caller encodes each ExecuteCall as a single frame first (so a payload that
  cannot be sent still fails in send_execute_call, at once, as it always did) and
  hands the frame to add(). The first call of a stretch is queued in the outbox
  as that single frame, in a bytearray the sender keeps; while that frame is
  still queued (the outbox has not handed it to the transport yet: flushes are
  FIFO, so `frames_written` tells), later calls are spliced into it, turning it
  into {"messageType": "ExecuteCallBatch", ..., "payload": {"calls": [env, ...]}}
  with the unchanged envelopes, and its length prefix is rewritten. Once the
  outbox flushed it, the bytearray is never touched again (the transport may
  still hold a view of it) and the next call opens a new frame.
- So a lone call still travels as a plain ExecuteCall, a burst of N calls costs
  the outbox one slot and the executor one frame, and the calls go out with the
  outbox's next flush, exactly when single frames would.
- Caps: a frame stays within MAX_FRAME_BYTES and holds at most `max_calls`
  calls; beyond either a new frame is opened (pushed like a single ExecuteCall:
  a full outbox paces it, never refuses it).
"""
from __future__ import annotations

import struct

from blockx._fast.errors import OutboxClosed

_PREFIX = b'{"messageType":"ExecuteCallBatch","callId":"","requestId":"","payload":{"calls":['
_SUFFIX = b"]}}"
_SUFFIX_LEN = len(_SUFFIX)
_pack_into = struct.pack_into


class BatchSender:
    __slots__ = ("outbox", "counters", "max_frame_bytes", "max_calls", "_frame", "_seq", "_count",
                 "frames", "calls")

    def __init__(self, outbox, counters, max_frame_bytes: int, max_calls: int = 256) -> None:
        if max_calls < 1:
            raise ValueError(f"max_calls must be >= 1, got {max_calls}")
        self.outbox = outbox
        self.counters = counters                # uds_frames_out / uds_bytes_out, as on the wire
        self.max_frame_bytes = max_frame_bytes
        self.max_calls = max_calls
        self._frame: bytearray | None = None   # the open frame, while the outbox still holds it
        self._seq = 0                          # its position: frames_written reaches it when flushed
        self._count = 0                        # ExecuteCalls in it
        self.frames = 0                        # frames opened (for tests and metrics)
        self.calls = 0                         # calls added

    def add(self, frame: bytes) -> None:
        """Queue one encoded single-ExecuteCall frame (4-byte length + JSON body).
        Raises OutboxClosed when a new frame is needed and the outbox is closed
        (then nothing was queued)."""
        outbox = self.outbox
        ba = self._frame
        if ba is not None and outbox.frames_written < self._seq and not outbox.closed:
            count = self._count
            body = len(frame) - 4
            extra = body + 1 if count > 1 else body + 1 + len(_PREFIX) + _SUFFIX_LEN
            if count < self.max_calls and len(ba) - 4 + extra <= self.max_frame_bytes:
                if count == 1:           # a plain ExecuteCall so far: wrap it
                    ba[4:4] = _PREFIX
                else:
                    del ba[-_SUFFIX_LEN:]
                ba += b","
                ba += memoryview(frame)[4:]
                ba += _SUFFIX
                _pack_into(">I", ba, 0, len(ba) - 4)
                self._count = count + 1
                self.calls += 1
                self.counters.uds_bytes_out += extra
                return
        if outbox.closed:
            raise OutboxClosed("outbox is closed; the connection is gone")
        ba = bytearray(frame)
        outbox.push(ba)
        self._frame = ba
        self._seq = outbox.frames_written + len(outbox)
        self._count = 1
        self.frames += 1
        self.calls += 1
        counters = self.counters
        counters.uds_frames_out += 1
        counters.uds_bytes_out += len(frame)
