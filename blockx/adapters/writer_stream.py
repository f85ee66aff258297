"""StreamedWrite: one task's writer consuming its settled batches as the task runs.

When the builder streams and the writer can (blockx.plugins.plugin_api), the
dispatcher hands each settled batch's outputs over with its BatchSettled and keeps
none of them. They come here, and the batch's credit with them:

- Order: batches may settle out of order; they reach the writer in batch order
  (a batch that settled early waits for the ones before it), so the writer sees
  the outputs in call-list order, as when it runs after the Calls phase.
- Sizes count each output as its bytes + OUTPUT_OVERHEAD (what it costs held).
- Writes: outputs gather until ``write_bytes`` of them are waiting, then go to the
  writer in one ``write`` (one at a time; the rest keep gathering meanwhile).
  The Plugin phase (``finish``) writes what is left and commits.
- Backpressure: a batch's credit goes back to the producer at once while the
  outputs waiting here (early, gathered, being written) stay within
  ``buffer_bytes``; past it the credit waits until the writer has consumed
  enough. A slow writer thus slows the producer, and the credit window bounds
  memory end to end: the producer, the calls in flight, the rows waiting here.
- Kept outputs: the first ones, up to ``keep_outputs`` and ``keep_output_bytes``,
  stay for the TaskResult; ``written`` counts every output the writer consumed.
- Failure: a write that fails ends the task at once (``on_failure``, with the
  plugin's result); everything after it is dropped and every credit returned.
  ``abort`` (the task failed, timed out or was cancelled) stops a write in
  progress and has the writer undo every write: nothing becomes visible.
"""
from __future__ import annotations

import asyncio
import logging
from collections import deque
from itertools import chain
from typing import Any, Callable

from blockx.core.config_rules import Rule
from blockx.core.types import PluginResult

log = logging.getLogger("blockx.phases")

# What one output costs in memory beyond its bytes (the bytes object's header and
# its list slot): the buffer's bounds count outputs as len + OUTPUT_OVERHEAD.
OUTPUT_OVERHEAD = 64
# The rules of the writerStream settings a StreamedWrite is built from.
WRITER_STREAM_RULES = (Rule("enabled", kind=bool), Rule("keep_outputs", 0, note="0 keeps none"),
                       Rule("keep_output_bytes", 0), Rule("buffer_bytes", 1), Rule("write_bytes", 1))


class StreamedWrite:
    def __init__(self, plugin: str, stream: Any, *, keep_outputs: int, keep_output_bytes: int,
                 buffer_bytes: int, write_bytes: int,
                 on_failure: Callable[[PluginResult, bool], None] | None = None) -> None:
        self.plugin = plugin
        self._stream = stream
        self._keep_n = keep_outputs
        self._keep_room = keep_output_bytes
        self._buffer_bytes = buffer_bytes
        self._write_bytes = write_bytes
        self._on_failure = on_failure
        self.kept: list[bytes] = []
        self.written = 0                   # outputs the writer consumed
        self._next = 0                     # the next batch to hand to the writer
        self._early: dict[int, tuple[list, int]] = {}   # settled before an earlier batch
        self._ready: list[list[bytes]] = []              # in order, waiting for a write
        self._ready_bytes = 0
        self.buffered = 0                  # bytes early + ready + in the write in progress
        self._held: deque[Callable[[], Any]] = deque()  # credits waiting for the writer
        self._writer: asyncio.Task | None = None
        self._closing = False
        self._aborted = False
        self.failure: PluginResult | None = None
        self.failure_retryable = False
        self.aborting: asyncio.Task | None = None

    # --- batches in ---------------------------------------------------------------------

    def offer(self, batch_idx: int, outputs: list[bytes] | None, release: Callable[[], Any]) -> None:
        """A settled batch's outputs (None: a batch discarded unrun) and the call
        that returns its credit."""
        if self.failure is not None or self._aborted:
            release()
            return
        outputs = outputs or []
        size = sum(map(len, outputs)) + OUTPUT_OVERHEAD * len(outputs)
        self._early[batch_idx] = (outputs, size)
        self.buffered += size
        early = self._early
        while self._next in early:
            batch, n = early.pop(self._next)
            self._next += 1
            if batch:
                self._keep(batch)
                self._ready.append(batch)
                self._ready_bytes += n
        if self.buffered <= self._buffer_bytes:
            release()
        else:
            self._held.append(release)
        self._kick()

    def _keep(self, batch: list[bytes]) -> None:
        room = self._keep_n - len(self.kept)
        if room <= 0 or self._keep_room <= 0:
            return
        for o in batch[:room]:
            if len(o) > self._keep_room:
                self._keep_room = 0
                return
            self._keep_room -= len(o)
            self.kept.append(o)

    # --- writes -------------------------------------------------------------------------

    def _due(self) -> bool:
        return bool(self._ready) and (self._closing or self._ready_bytes >= self._write_bytes)

    def _kick(self) -> None:
        if self._writer is None and self.failure is None and not self._aborted and self._due():
            self._writer = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        try:
            while self._due() and self.failure is None and not self._aborted:
                batches, size = self._ready, self._ready_bytes
                self._ready, self._ready_bytes = [], 0
                flat = batches[0] if len(batches) == 1 else list(chain.from_iterable(batches))
                del batches
                await self._stream.write(flat)
                self.written += len(flat)
                del flat
                self.buffered -= size
                self._release_held()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - PluginError, a data-source error or a writer bug
            self._fail(exc)
        finally:
            self._writer = None

    def _release_held(self) -> None:
        held = self._held
        while held and (self.buffered <= self._buffer_bytes or self.failure is not None or self._aborted):
            held.popleft()()

    def _fail(self, exc: Exception) -> None:
        msg = str(exc) if str(exc).startswith(self.plugin) else f"{type(exc).__name__}: {exc}"
        self.failure = PluginResult(self.plugin, False, msg)
        self.failure_retryable = bool(getattr(exc, "retryable", False))
        self._drop()
        if self._on_failure is not None:
            self._on_failure(self.failure, self.failure_retryable)

    def _drop(self) -> None:
        self._early.clear()
        self._ready, self._ready_bytes = [], 0
        self.buffered = 0
        self._release_held()

    # --- the end ------------------------------------------------------------------------

    async def finish(self) -> tuple[PluginResult, bool]:
        """The Plugin phase: write what is left, commit. (result, retryable)."""
        self._closing = True
        if self._early and self.failure is None:
            missing = self._next
            self._fail(RuntimeError(f"{self.plugin}: batch {missing} never reached the writer"))
        self._kick()
        while self._writer is not None:
            await self._writer
        if self.failure is not None:
            return self.failure, self.failure_retryable
        r = await self._stream.commit()
        return PluginResult(r.plugin, r.ok, r.message, r.details), bool(getattr(r, "retryable", False)) and not r.ok

    def abort(self) -> asyncio.Task | None:
        """The task ended without success (or after its commit): stop the write in
        progress and undo every write. Returns the task doing it (first call only)."""
        if self._aborted:
            return None
        self._aborted = True
        self._drop()
        writer = self._writer
        if writer is not None:
            writer.cancel()
        self.aborting = asyncio.get_running_loop().create_task(self._abort(writer))
        return self.aborting

    async def _abort(self, writer: asyncio.Task | None) -> None:
        if writer is not None:
            await asyncio.wait({writer})
        try:
            await self._stream.abort()
        except Exception:  # noqa: BLE001 - a broken connection: nothing was committed
            log.exception("aborting the streamed write of %s failed", self.plugin)
