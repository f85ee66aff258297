"""BatchSender against the real Outbox (compiled and twin) over a real socketpair
on uvloop: a lone ExecuteCall stays a plain frame, a burst becomes ONE
ExecuteCallBatch frame of the unchanged envelopes, a flushed frame is never
touched again, the caps open new frames, a full outbox refuses a new frame."""

import asyncio
import socket

import pytest

from blockx._fast import implementations, load
from blockx._fast.errors import OutboxFull
from blockx.adapters.executor.batch_sender import BatchSender
from blockx.adapters.executor.counters import LocalCounters
from blockx.protocol import messages as m

codec = load("codec")
IMPLS = implementations("outbox")


@pytest.fixture(params=[mod for _, mod in IMPLS], ids=[label for label, _ in IMPLS])
async def wire(request):
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    b.setblocking(False)
    transport, _ = await loop.create_connection(asyncio.Protocol, sock=a)
    made = []

    def make(depth=256, max_frame_bytes=codec.MAX_FRAME_BYTES, max_calls=256):
        outbox = request.param.Outbox(transport, loop, depth, 64)
        sender = BatchSender(outbox, LocalCounters(), max_frame_bytes, max_calls)
        made.append(sender)
        return outbox, sender

    async def read(n_frames, decoder=codec.FrameDecoder()):
        out, raw = [], bytearray()
        deadline = loop.time() + 3
        while len(out) < n_frames:
            assert loop.time() < deadline, f"got {len(out)} of {n_frames} frames"
            try:
                data = b.recv(1 << 20)
            except BlockingIOError:
                await asyncio.sleep(0.002)
                continue
            raw += data
            out.extend(decoder.feed(data))
        return [env for env, _ in out], len(raw)

    yield make, read
    transport.close()
    b.close()


def frame_of(call_id, args=(1, 2), attempt=1):
    return codec.encode_frame(m.execute_call(call_id, "t1", "add", "d" * 64, list(args), attempt))


def calls_of(env):
    if env["messageType"] == m.EXECUTE_CALL:
        return [env]
    m.validate(env, m.WORKER_TO_EXECUTOR)
    return m.execute_call_batch_items(env["payload"])


async def test_a_lone_call_stays_a_plain_execute_call(wire):
    make, read = wire
    outbox, sender = make()
    sender.add(frame_of("c1"))
    frames, nbytes = await read(1)
    assert [e["messageType"] for e in frames] == [m.EXECUTE_CALL] and frames[0]["callId"] == "c1"
    assert (sender.counters.uds_frames_out, sender.counters.uds_bytes_out) == (1, nbytes)


async def test_a_burst_is_one_batch_frame_of_the_unchanged_envelopes(wire):
    make, read = wire
    outbox, sender = make()
    for i in range(5):
        sender.add(frame_of(f"c{i}", (i, i), attempt=i + 1))
    assert len(outbox) == 1
    frames, nbytes = await read(1)
    assert [e["messageType"] for e in frames] == [m.EXECUTE_CALL_BATCH]
    assert frames[0]["callId"] == "" and frames[0]["requestId"] == ""
    got = calls_of(frames[0])
    assert got == [m.execute_call(f"c{i}", "t1", "add", "d" * 64, [i, i], i + 1) for i in range(5)]
    assert (sender.counters.uds_frames_out, sender.counters.uds_bytes_out) == (1, nbytes)
    assert (sender.frames, sender.calls) == (1, 5)


async def test_a_flushed_frame_is_left_alone_and_the_next_call_opens_a_new_one(wire):
    make, read = wire
    outbox, sender = make()
    sender.add(frame_of("a"))
    sender.add(frame_of("b"))
    first, _ = await read(1)
    sender.add(frame_of("c"))
    sender.add(frame_of("d"))
    sender.add(frame_of("e"))
    second, _ = await read(1)
    assert [[c["callId"] for c in calls_of(f)] for f in first + second] == [["a", "b"], ["c", "d", "e"]]
    assert sender.frames == 2


async def test_caps_open_new_frames(wire):
    make, read = wire
    outbox, sender = make(max_calls=3)
    for i in range(7):
        sender.add(frame_of(f"c{i}"))
    frames, _ = await read(3)
    assert [[c["callId"] for c in calls_of(f)] for f in frames] == [["c0", "c1", "c2"], ["c3", "c4", "c5"], ["c6"]]
    one = len(frame_of("c0"))
    outbox, sender = make(max_frame_bytes=2 * one + 100)   # two envelopes fit in a batch, three do not
    for i in range(5):
        sender.add(frame_of(f"x{i}"))
    frames, _ = await read(3)
    assert [[c["callId"] for c in calls_of(f)] for f in frames] == [["x0", "x1"], ["x2", "x3"], ["x4"]]


async def test_a_full_outbox_paces_a_new_frame_instead_of_refusing_it(wire):
    make, read = wire
    outbox, sender = make(depth=1, max_calls=2)
    sender.add(frame_of("a"))
    sender.add(frame_of("b"))         # joins the queued frame
    sender.add(frame_of("c"))         # the frame is full (max_calls): a new one waits past the depth
    sender.add(frame_of("d"))         # joins that one, still queued
    assert (sender.frames, sender.calls) == (2, 4) and len(outbox) == 2
    with pytest.raises(OutboxFull):
        outbox.enqueue(b"\x00\x00\x00\x02{}")   # what may be refused (a HeartbeatAck) still is
    frames, _ = await read(2)
    assert [[c["callId"] for c in calls_of(f)] for f in frames] == [["a", "b"], ["c", "d"]]
