"""The scheduler driven in-process over a socketpair (no executor process), for
properties that are awkward to observe from outside."""

import socket

from blockx.protocol import messages as m
from blockx_executor.code_cache import source_digest
from blockx_executor.scheduler import Scheduler
from blockx_executor.transport import Connection

from . import functions as fn
from .fake_worker import codec


def make_scheduler(**kw):
    a, b = socket.socketpair()
    b.settimeout(5)
    s = Scheduler(Connection(a), codec, max_inflight=kw.pop("max_inflight", 4096),
                  max_runnable=128, **kw)
    return s, b


def read_frames(sock, decoder, n):
    out = []
    while len(out) < n:
        out.extend(decoder.feed(sock.recv(1 << 20)))
    return out


def test_stale_budget_timers_are_compacted():
    s, peer = make_scheduler()
    d = source_digest(fn.IO_JSON)
    s.code.add("io", d, fn.IO_JSON, d)
    decoder = codec.FrameDecoder()
    total = 3000
    for batch in range(0, total, 500):
        frames = [(m.execute_call(f"c{i}", "t", "io", d, [i], 1, call_budget_ms=60_000), None)
                  for i in range(batch, batch + 500)]
        s.handle_frames(frames)
        s.run_ready()
        s.conn.flush()
        waits = read_frames(peer, decoder, 500)
        s.handle_frames([(m.resume_call_result(e["callId"], e["requestId"], "io", 1), None)
                         for e, _ in waits])
        s.run_ready()
        s.conn.flush()
        read_frames(peer, decoder, 500)
    assert s.inflight == 0 and not s.calls
    # 3000 budget timers were armed and all went stale; the heap did not keep them all.
    assert len(s.timers) <= 1024


def test_available_contexts_and_runnable_count():
    s, peer = make_scheduler(max_inflight=2)
    d = source_digest(fn.ADD)
    s.code.add("add", d, fn.ADD, d)
    s.handle_frames([(m.execute_call(f"c{i}", "t", "add", d, [i, i], 1), None)
                     for i in range(5)])
    assert (s.inflight, s.runnable_count(), s.available_contexts()) == (2, 5, 0)
    s.run_ready()
    s.run_ready()
    s.run_ready()
    assert (s.inflight, s.runnable_count(), s.available_contexts()) == (0, 0, 2)
