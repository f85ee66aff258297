"""Outbox: write coalescing (one writelines per flush, one flush per loop
iteration, at most max_batch frames each), OutboxFull at depth, awaited send,
pause/resume, close failing waiters. Runs against the compiled outbox and its
twin on the real uvloop loop with a recording fake transport, then once over a
real socketpair with a uvloop transport."""

import asyncio
import socket

import pytest

from blockx._fast import errors, implementations, load

IMPLS = implementations("outbox")


@pytest.fixture(params=[mod for _, mod in IMPLS], ids=[label for label, _ in IMPLS])
def Outbox(request):
    return request.param.Outbox


class Ticker:
    """Counts loop iterations: a callback that re-arms itself with call_soon runs
    exactly once per iteration."""

    def __init__(self, loop):
        self.n = 0
        self.loop = loop
        self.running = True
        loop.call_soon(self._tick)

    def _tick(self):
        self.n += 1
        if self.running:
            self.loop.call_soon(self._tick)

    def stop(self):
        self.running = False


class FakeTransport:
    def __init__(self, ticker=None, fail=None):
        self.calls = []  # (iteration, [frames])
        self.ticker = ticker
        self.fail = fail
        self.on_write = None

    def writelines(self, frames):
        if self.fail is not None:
            raise self.fail
        self.calls.append((self.ticker.n if self.ticker else 0, list(frames)))
        if self.on_write is not None:
            self.on_write()

    @property
    def written(self):
        return [f for _, batch in self.calls for f in batch]

    @property
    def batch_sizes(self):
        return [len(batch) for _, batch in self.calls]


async def spin(n=3):
    for _ in range(n):
        await asyncio.sleep(0)


def frames(n, tag=b"f"):
    return [tag + b"%d" % i for i in range(n)]


async def test_frames_of_one_iteration_go_out_in_one_writelines(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop)
    for f in frames(10):
        assert box.enqueue(f) is None
    assert len(box) == 10 and t.calls == []  # nothing written synchronously
    await spin()
    assert t.batch_sizes == [10]
    assert t.written == frames(10)
    assert len(box) == 0 and box.flushes == 1 and box.frames_written == 10


async def test_enqueues_in_separate_iterations_flush_separately(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop)
    box.enqueue(b"a")
    await spin()
    box.enqueue(b"b")
    box.enqueue(b"c")
    await spin()
    assert t.batch_sizes == [1, 2] and t.written == [b"a", b"b", b"c"]


async def test_at_most_max_batch_per_flush_and_one_flush_per_iteration(Outbox):
    loop = asyncio.get_running_loop()
    ticker = Ticker(loop)
    t = FakeTransport(ticker)
    box = Outbox(t, loop)
    assert box.depth == 256 and box.max_batch == 64
    for f in frames(200):
        box.enqueue(f)
    await spin(8)
    ticker.stop()
    assert t.batch_sizes == [64, 64, 64, 8]
    iterations = [it for it, _ in t.calls]
    assert len(set(iterations)) == len(iterations), iterations  # never two in one iteration
    assert iterations == sorted(iterations)
    assert t.written == frames(200)


async def test_custom_depth_and_batch(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop, depth=5, max_batch=2)
    for f in frames(5):
        box.enqueue(f)
    with pytest.raises(errors.OutboxFull):
        box.enqueue(b"x")
    await spin(5)
    assert t.batch_sizes == [2, 2, 1]


@pytest.mark.parametrize("depth,max_batch", [(0, 64), (256, 0), (-1, 1)])
async def test_rejects_nonsense_limits(Outbox, depth, max_batch):
    with pytest.raises(ValueError, match="must be >= 1"):
        Outbox(FakeTransport(), asyncio.get_running_loop(), depth, max_batch)


async def test_full_outbox_raises_retryable_error_and_recovers(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop)
    for f in frames(256):
        box.enqueue(f)
    with pytest.raises(errors.OutboxFull, match=r"256 frames queued \(depth 256\)") as info:
        box.enqueue(b"overflow")
    assert info.value.retryable is True
    assert len(box) == 256
    await spin(1)
    box.enqueue(b"room again")  # one flush freed 64 slots
    await spin(6)
    assert t.written == frames(256) + [b"room again"]


async def test_a_burst_of_pushed_frames_past_the_depth_is_paced_not_refused(Outbox):
    # 300 ExecuteCalls to one executor in one loop iteration: the first 256 fill
    # the outbox, the rest wait behind them; 64 leave per iteration, in order.
    loop = asyncio.get_running_loop()
    ticker = Ticker(loop)
    t = FakeTransport(ticker)
    box = Outbox(t, loop)
    for f in frames(300):
        assert box.push(f) is None
    assert len(box) == 300 and t.calls == []
    with pytest.raises(errors.OutboxFull, match=r"300 frames queued \(depth 256\)"):
        box.enqueue(b"heartbeat-ack")      # a frame that may be dropped still is
    await spin(8)
    ticker.stop()
    assert t.batch_sizes == [64, 64, 64, 64, 44]
    assert t.written == frames(300)
    assert len({it for it, _ in t.calls}) == 5          # one flush per iteration
    assert len(box) == 0 and box.frames_written == 300


async def test_pushed_frames_wait_out_a_pause_and_a_send_waits_behind_them(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop, depth=4, max_batch=2)
    box.pause_writing()
    for f in frames(6):
        box.push(f)
    task = loop.create_task(box.send(b"resume"))
    await spin(3)
    assert t.calls == [] and len(box) == 6 and not task.done()
    box.resume_writing()
    await asyncio.wait_for(task, 2)
    assert t.written == frames(6) + [b"resume"]
    assert max(t.batch_sizes) == 2


async def test_push_after_close_raises_outbox_closed(Outbox):
    box = Outbox(FakeTransport(), asyncio.get_running_loop(), depth=1)
    box.push(b"a")
    box.push(b"b")
    box.close()
    with pytest.raises(errors.OutboxClosed):
        box.push(b"c")


async def test_send_resolves_once_its_frame_was_handed_to_the_transport(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop)
    for f in frames(100):
        box.enqueue(f)
    seen_at_resolution = []

    async def resume():
        await box.send(b"resume")
        seen_at_resolution.append(list(t.written))

    task = loop.create_task(resume())
    await spin(1)
    assert not task.done()
    await task
    # The frame was written (after everything queued before it) when send returned.
    assert seen_at_resolution[0][-1] == b"resume"
    assert seen_at_resolution[0] == frames(100) + [b"resume"]
    assert t.batch_sizes == [64, 37]


async def test_send_waits_for_room_instead_of_failing(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop, depth=4, max_batch=2)
    for f in frames(4):
        box.enqueue(f)
    box.pause_writing()
    task = loop.create_task(box.send(b"cancel"))
    await spin(3)
    assert not task.done() and len(box) == 4 and t.calls == []
    box.resume_writing()
    await asyncio.wait_for(task, 1)
    assert t.written == frames(4) + [b"cancel"]


async def test_many_concurrent_sends_resolve_in_order(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop, depth=8, max_batch=3)
    done = []

    async def one(i):
        await box.send(b"s%d" % i)
        done.append(i)
        assert (b"s%d" % i) in t.written

    await asyncio.gather(*(one(i) for i in range(30)))
    assert sorted(done) == list(range(30))
    assert sorted(t.written) == sorted(b"s%d" % i for i in range(30))
    assert max(t.batch_sizes) <= 3


async def test_cancelled_send_does_not_disturb_others(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop)
    box.pause_writing()
    a = loop.create_task(box.send(b"a"))
    b = loop.create_task(box.send(b"b"))
    await spin()
    a.cancel()
    box.resume_writing()
    await b
    assert a.cancelled()
    assert t.written == [b"a", b"b"]  # a cancelled send may still have been queued


async def test_pause_stops_flushing_until_resume(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop)
    box.pause_writing()
    assert box.paused
    for f in frames(256):
        box.enqueue(f)
    await spin(5)
    assert t.calls == []
    with pytest.raises(errors.OutboxFull, match="while the transport is paused"):
        box.enqueue(b"x")
    box.resume_writing()
    assert not box.paused
    await spin(6)
    assert t.batch_sizes == [64, 64, 64, 64] and t.written == frames(256)


async def test_pause_from_inside_writelines_stops_further_flushes(Outbox):
    """A real transport calls protocol.pause_writing() synchronously from
    writelines() when its buffer crosses the high-water mark."""
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop)
    t.on_write = box.pause_writing
    for f in frames(150):
        box.enqueue(f)
    await spin(5)
    assert t.batch_sizes == [64]
    t.on_write = None
    box.resume_writing()
    await spin(5)
    assert t.batch_sizes == [64, 64, 22]


async def test_pause_resume_while_a_flush_is_scheduled(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop)
    box.enqueue(b"a")  # flush scheduled
    box.pause_writing()
    box.resume_writing()  # must not schedule a second flush
    box.enqueue(b"b")
    await spin()
    assert t.batch_sizes == [2]


async def test_close_fails_waiters_and_rejects_new_frames(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop, depth=2)
    box.pause_writing()
    sending = loop.create_task(box.send(b"a"))
    box.enqueue(b"b")
    waiting_for_room = loop.create_task(box.send(b"c"))
    await spin()
    lost = ConnectionResetError("executor went away")
    box.close(lost)
    assert box.closed and len(box) == 0
    with pytest.raises(ConnectionResetError):
        await sending
    with pytest.raises(ConnectionResetError):
        await waiting_for_room
    with pytest.raises(errors.OutboxClosed) as info:
        box.enqueue(b"late")
    assert info.value.retryable is True and info.value.__cause__ is lost
    with pytest.raises(errors.OutboxClosed):
        await box.send(b"late")
    box.close(RuntimeError("second close is ignored"))
    box.resume_writing()
    await spin()
    assert t.calls == []  # queued frames were dropped, never written


async def test_close_without_exception_uses_outbox_closed(Outbox):
    loop = asyncio.get_running_loop()
    box = Outbox(FakeTransport(), loop)
    box.pause_writing()
    task = loop.create_task(box.send(b"a"))
    await spin()
    box.close()
    with pytest.raises(errors.OutboxClosed):
        await task


async def test_scheduled_flush_after_close_writes_nothing(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop)
    box.enqueue(b"a")
    box.close()
    await spin()
    assert t.calls == []


async def test_failing_transport_closes_the_outbox(Outbox):
    loop = asyncio.get_running_loop()
    boom = OSError("broken pipe")
    box = Outbox(FakeTransport(fail=boom), loop)
    with pytest.raises(OSError, match="broken pipe"):
        await box.send(b"a")
    assert box.closed
    with pytest.raises(errors.OutboxClosed):
        box.enqueue(b"b")


# --- over a real socketpair with a uvloop transport -------------------------------------

class OutboxProtocol(asyncio.Protocol):
    def __init__(self, make_outbox):
        self.make_outbox = make_outbox
        self.outbox = None
        self.pauses = 0
        self.lost = None

    def connection_made(self, transport):
        self.outbox = self.make_outbox(transport)

    def pause_writing(self):
        self.pauses += 1
        self.outbox.pause_writing()

    def resume_writing(self):
        self.outbox.resume_writing()

    def connection_lost(self, exc):
        self.lost = exc
        self.outbox.close(exc or ConnectionResetError("connection closed"))


async def test_real_uvloop_socketpair_backpressure_and_order(Outbox):
    import uvloop

    loop = asyncio.get_running_loop()
    assert isinstance(loop, uvloop.Loop)
    codec = load("codec")
    ours, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    peer.setblocking(False)
    proto = OutboxProtocol(lambda tr: Outbox(tr, loop))
    transport, _ = await loop.create_unix_connection(lambda: proto, sock=ours)
    transport.set_write_buffer_limits(high=16384, low=4096)
    box = proto.outbox
    side = b"\xab" * 16384
    sent = 0
    try:
        # The peer does not read: kernel buffer, then transport buffer fill up,
        # the transport pauses us, and the outbox fills to its depth.
        for _ in range(400):
            try:
                box.enqueue(codec.encode_frame({"messageType": "ExecuteCall", "seq": sent}, side))
            except errors.OutboxFull:
                break
            sent += 1
            await asyncio.sleep(0)
        else:
            pytest.fail("outbox never filled although the peer never read")
        assert proto.pauses >= 1 and box.paused
        assert len(box) == 256
        # A ResumeCall must wait for room, then for the flush, while the peer drains.
        resume = loop.create_task(box.send(codec.encode_frame(
            {"messageType": "ResumeCall", "seq": sent}, None)))
        dec = codec.FrameDecoder()
        got = []
        while len(got) < sent + 1:
            chunk = await asyncio.wait_for(loop.sock_recv(peer, 262144), 5)
            assert chunk, "peer saw EOF early"
            got += dec.feed(chunk)
        await asyncio.wait_for(resume, 5)
        assert [env["seq"] for env, _ in got] == list(range(sent + 1))
        assert all(s == side for _, s in got[:-1]) and got[-1][1] is None
        assert got[-1][0]["messageType"] == "ResumeCall"
        assert not box.paused and len(box) == 0
        assert box.frames_written == sent + 1
        assert box.flushes < sent + 1  # frames were coalesced
    finally:
        transport.close()
        peer.close()
    await spin()
    assert box.closed


class Notified:
    """A waiter object, not a Future: what enqueue_notify tells."""

    def __init__(self, log, name, written):
        self.log, self.name, self.written, self._done = log, name, written, False

    def done(self):
        return self._done

    def set_result(self, value):
        self._done = True
        self.log.append((self.name, "written", list(self.written())))

    def set_exception(self, exc):
        self._done = True
        self.log.append((self.name, "failed", type(exc).__name__))


async def test_enqueue_notify_tells_the_waiter_once_its_frame_was_written(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop, depth=3, max_batch=2)
    log = []
    box.enqueue(b"a")
    box.enqueue_notify(b"b", Notified(log, "b", lambda: t.written))
    box.enqueue_notify(b"c", Notified(log, "c", lambda: t.written))
    assert log == [] and len(box) == 3
    with pytest.raises(errors.OutboxFull):             # full: fails like enqueue, nothing queued
        box.enqueue_notify(b"d", Notified(log, "d", lambda: t.written))
    await spin(1)
    assert log == [("b", "written", [b"a", b"b"])]     # told in the flush that wrote it
    await spin(2)
    assert log == [("b", "written", [b"a", b"b"]), ("c", "written", [b"a", b"b", b"c"])]
    assert t.written == [b"a", b"b", b"c"]


async def test_enqueue_notify_waiter_fails_when_the_outbox_closes_first(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop)
    log = []
    box.enqueue_notify(b"a", Notified(log, "a", lambda: t.written))
    box.close(errors.OutboxClosed("gone"))
    assert log == [("a", "failed", "OutboxClosed")]
    await spin()
    assert t.written == [] and log == [("a", "failed", "OutboxClosed")]
    with pytest.raises(errors.OutboxClosed):
        box.enqueue_notify(b"b", Notified(log, "b", lambda: t.written))


async def test_a_waiter_that_enqueues_while_told_gets_its_frame_into_the_next_flush(Outbox):
    loop = asyncio.get_running_loop()
    ticker = Ticker(loop)
    t = FakeTransport(ticker)
    box = Outbox(t, loop)
    log = []

    class Chain(Notified):
        def set_result(self, value):
            super().set_result(value)
            if self.name == "a":
                box.enqueue_notify(b"b", Notified(log, "b", lambda: t.written))

    box.enqueue_notify(b"a", Chain(log, "a", lambda: t.written))
    await spin(4)
    ticker.stop()
    assert t.batch_sizes == [1, 1] and [e[0] for e in log] == ["a", "b"]


async def test_flush_now_writes_at_once_and_the_scheduled_flush_finds_nothing(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop)
    log = []
    box.enqueue(b"a")
    box.enqueue_notify(b"b", Notified(log, "b", lambda: t.written))
    box.flush_now()
    assert t.calls == [(0, [b"a", b"b"])] and len(box) == 0      # synchronously, one writelines
    assert log == [("b", "written", [b"a", b"b"])]
    box.enqueue(b"c")                                             # rides the flush already scheduled
    await spin()
    assert t.batch_sizes == [2, 1] and box.flushes == 2 and box.frames_written == 3


async def test_flush_now_writes_at_most_max_batch_and_leaves_the_rest_scheduled(Outbox):
    loop = asyncio.get_running_loop()
    ticker = Ticker(loop)
    t = FakeTransport(ticker)
    box = Outbox(t, loop, max_batch=4)
    for f in frames(10):
        box.enqueue(f)
    box.flush_now()
    assert t.batch_sizes == [4] and len(box) == 6
    await spin(4)
    ticker.stop()
    assert t.batch_sizes == [4, 4, 2] and t.written == frames(10)


async def test_flush_now_writes_nothing_while_paused_closed_or_empty(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport()
    box = Outbox(t, loop)
    box.flush_now()                                      # empty
    box.enqueue(b"a")
    box.pause_writing()
    box.flush_now()
    assert t.calls == [] and len(box) == 1
    box.resume_writing()
    box.flush_now()
    assert t.written == [b"a"]
    box.enqueue(b"b")
    box.close()
    box.flush_now()                                      # closed: dropped, never raises
    await spin()
    assert t.written == [b"a"]


async def test_flush_now_on_a_failing_transport_closes_the_outbox(Outbox):
    loop = asyncio.get_running_loop()
    t = FakeTransport(fail=ConnectionResetError("peer gone"))
    box = Outbox(t, loop)
    log = []
    box.enqueue_notify(b"a", Notified(log, "a", lambda: t.written))
    box.flush_now()
    assert box.closed and log == [("a", "failed", "ConnectionResetError")]
