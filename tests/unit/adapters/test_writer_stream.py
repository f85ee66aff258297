"""StreamedWrite: batch order, gathered writes, the kept outputs, backpressure on
the credits, a failing write and abort. The writer here is an in-process
WriterStream that records what it is given (the protocol is three coroutines;
the real writers run against real databases in tests/integration/data and
tests/e2e/test_streamed_writes.py)."""
from __future__ import annotations

import asyncio

import pytest

from blockx.adapters.writer_stream import OUTPUT_OVERHEAD, StreamedWrite
from blockx.core.types import PluginResult
from blockx.plugins.plugin_api import PluginError


class Recorder:
    def __init__(self, gate: asyncio.Event | None = None, fail_on: bytes | None = None) -> None:
        self.writes: list[list[bytes]] = []
        self.gate = gate
        self.fail_on = fail_on
        self.committed = False
        self.aborted = False
        self.cancelled = False

    async def write(self, outputs):
        try:
            if self.gate is not None:
                await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if self.fail_on is not None and self.fail_on in outputs:
            err = PluginError(f"rec: nothing written: bad output {self.fail_on!r}")
            err.retryable = True
            raise err
        self.writes.append(list(outputs))

    async def commit(self):
        self.committed = True
        return PluginResult("rec", True, f"{sum(map(len, self.writes))} written", b"{}")

    async def abort(self):
        self.aborted = True


def _sw(rec, **kw):
    args = {"keep_outputs": 3, "keep_output_bytes": 1 << 20, "buffer_bytes": 1 << 20, "write_bytes": 1}
    args.update(kw)
    return StreamedWrite("rec", rec, **args)


def _size(outputs):
    return sum(len(o) + OUTPUT_OVERHEAD for o in outputs)


async def _settle():
    for _ in range(5):
        await asyncio.sleep(0)


async def test_batches_reach_the_writer_in_batch_order_and_commit():
    rec = Recorder()
    sw = _sw(rec, write_bytes=1 << 20)            # gathered until finish
    released = []
    sw.offer(1, [b"c", b"d"], lambda: released.append(1))
    sw.offer(0, [b"a", b"b"], lambda: released.append(0))
    sw.offer(2, [b"e"], lambda: released.append(2))
    await _settle()
    assert rec.writes == [] and released == [1, 0, 2]     # within the buffer: credits at once
    r, retryable = await sw.finish()
    assert r.ok and not retryable and rec.committed
    assert rec.writes == [[b"a", b"b", b"c", b"d", b"e"]]
    assert sw.written == 5 and sw.kept == [b"a", b"b", b"c"]


async def test_writes_start_once_write_bytes_gathered():
    rec = Recorder()
    sw = _sw(rec, write_bytes=_size([b"xx"] * 2))
    sw.offer(0, [b"xx"], lambda: None)
    await _settle()
    assert rec.writes == []
    sw.offer(1, [b"yy"], lambda: None)
    await _settle()
    assert rec.writes == [[b"xx", b"yy"]] and sw.written == 2
    sw.offer(2, [b"zz"], lambda: None)
    await sw.finish()
    assert rec.writes[-1] == [b"zz"] and sw.written == 3


async def test_a_slow_writer_holds_the_credits_past_the_buffer():
    gate = asyncio.Event()
    rec = Recorder(gate)
    sw = _sw(rec, buffer_bytes=_size([b"0123456789"] * 2))
    released = []
    for i in range(4):
        sw.offer(i, [b"0123456789"], lambda i=i: released.append(i))
        await _settle()
    # the first write is stuck: two batches fit the buffer, the next two wait
    assert released == [0, 1] and sw.buffered == _size([b"0123456789"] * 4)
    gate.set()
    await _settle()
    assert released == [0, 1, 2, 3] and sw.buffered == 0
    r, _ = await sw.finish()
    assert r.ok and sw.written == 4


async def test_the_kept_outputs_respect_both_bounds():
    sw = _sw(Recorder(), keep_outputs=10, keep_output_bytes=5)
    sw.offer(0, [b"ab", b"cd", b"ef", b"gh"], lambda: None)
    await sw.finish()
    assert sw.kept == [b"ab", b"cd"]
    sw = _sw(Recorder(), keep_outputs=0)
    sw.offer(0, [b"ab"], lambda: None)
    await sw.finish()
    assert sw.kept == [] and sw.written == 1


async def test_a_failing_write_ends_the_task_once_and_returns_every_credit():
    gate = asyncio.Event()
    rec = Recorder(gate, fail_on=b"bad")
    failures = []
    sw = StreamedWrite("rec", rec, keep_outputs=0, keep_output_bytes=0, buffer_bytes=1, write_bytes=1,
                       on_failure=lambda r, retryable: failures.append((r.message, retryable)))
    released = []
    sw.offer(0, [b"bad"], lambda: released.append(0))
    sw.offer(1, [b"ok"], lambda: released.append(1))
    await _settle()
    assert released == []                               # over the 1-byte buffer: held
    gate.set()
    await _settle()
    assert failures == [("rec: nothing written: bad output b'bad'", True)]
    assert released == [0, 1]
    sw.offer(2, [b"late"], lambda: released.append(2))  # after the failure: dropped, credit back
    assert released == [0, 1, 2]
    r, retryable = await sw.finish()
    assert not r.ok and retryable and r.message.startswith("rec: nothing written") and not rec.committed


async def test_abort_cancels_the_write_in_progress_and_undoes_everything():
    gate = asyncio.Event()
    rec = Recorder(gate)
    sw = _sw(rec, buffer_bytes=1)
    released = []
    sw.offer(0, [b"a"], lambda: released.append(0))
    await _settle()
    task = sw.abort()
    assert sw.abort() is None                           # once
    await task
    assert rec.cancelled and rec.aborted and not rec.committed and released == [0]
    sw.offer(1, [b"b"], lambda: released.append(1))
    assert released == [0, 1]


async def test_a_batch_discarded_unrun_keeps_the_order_going():
    rec = Recorder()
    sw = _sw(rec, write_bytes=1 << 20)
    sw.offer(0, None, lambda: None)
    sw.offer(1, [b"x"], lambda: None)
    r, _ = await sw.finish()
    assert r.ok and rec.writes == [[b"x"]]


async def test_a_batch_that_never_arrived_fails_the_commit():
    rec = Recorder()
    sw = _sw(rec, write_bytes=1 << 20)
    sw.offer(1, [b"x"], lambda: None)
    r, _ = await sw.finish()
    assert not r.ok and "batch 0 never reached the writer" in r.message and not rec.committed


@pytest.mark.parametrize("n", [1, 7])
async def test_cancelling_finish_leaves_abort_to_undo(n):
    gate = asyncio.Event()
    rec = Recorder(gate)
    sw = _sw(rec)
    for i in range(n):
        sw.offer(i, [b"v%d" % i], lambda: None)
    fin = asyncio.ensure_future(sw.finish())
    await _settle()
    fin.cancel()
    with pytest.raises(asyncio.CancelledError):
        await fin
    await sw.abort()
    assert rec.aborted and not rec.committed
