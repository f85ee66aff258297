"""The executor's scheduler, in-process over a socketpair: one chunk of 64
ExecuteCalls of a function that returns without calling the SDK, as the
executor's loop handles it: decode, validate, admit, run (fresh calls run back
to back in one runner greenlet: no switch per call), encode the 64
CallCompleted frames and send them in one write; the peer's end is drained
outside the timed region.

"Compiled vs twin" is the codec under BLOCKX_NO_EXTENSIONS=1 (twin_env); the
scheduler itself is Python, so the ratio is informational (check=False)."""

import os
import sys
from time import perf_counter

from bench.micro import REPO_ROOT, register, sides

REQUIRES = ("executor/blockx_executor/scheduler.py",)
CHUNK = 64
ADD = "def main(a, b):\n    return a + b\n"


def executor_in_process(functions: dict) -> dict:
    """An executor Scheduler over a socketpair with `functions` (id -> source) in
    its code cache: {"s", "peer" (the Worker's end, non-blocking), "codec", "m",
    "digests", "twins"}. Shared with bench_executor_subcall."""
    sys.path.insert(0, os.path.join(REPO_ROOT, "executor"))
    import socket

    import blockx._fast as fast
    from blockx.protocol import messages as m
    from blockx_executor.code_cache import source_digest
    from blockx_executor.scheduler import Scheduler
    from blockx_executor.transport import Connection

    codec = fast.load("codec")
    a, b = socket.socketpair()
    b.setblocking(False)
    s = Scheduler(Connection(a), codec, max_inflight=4096, max_runnable=128)
    digests = {}
    for fid, src in functions.items():
        digests[fid] = source_digest(src)
        s.code.add(fid, digests[fid], src, digests[fid])
    return {"s": s, "peer": b, "codec": codec, "m": m, "digests": digests, "twins": fast.NO_EXTENSIONS}


def setup():
    state = executor_in_process({"add": ADD})
    state.update(digest=state["digests"]["add"], seq=[0])
    return state




def run(state, loops):
    s, peer, codec, m, digest = state["s"], state["peer"], state["codec"], state["m"], state["digest"]
    seq = state["seq"][0]
    elapsed = 0.0
    for _ in range(loops):
        chunk = b"".join(codec.encode_frame(m.execute_call(f"c{seq + i}", "t", "add", digest, [i, 1], 1))
                         for i in range(CHUNK))
        seq += CHUNK
        t0 = perf_counter()
        s.handle_frames(s.decoder.feed(chunk))
        s.run_ready()
        s.conn.flush()
        elapsed += perf_counter() - t0
        got = 0
        while True:
            try:
                got += len(peer.recv(1 << 20))
            except BlockingIOError:
                break
        if not got or s.calls:
            raise AssertionError("the chunk did not complete")
    state["seq"][0] = seq
    return elapsed


register("executor chunk of 64 calls that never suspend", setup, *sides(run), twin_env=True,
         requires=REQUIRES, check=False)
