"""Write outbox: enqueue 64 frames, then run the one flush they scheduled
(one transport.writelines of the whole batch). The loop and transport are
minimal fakes so only the outbox's own work is timed: call_soon records the
flush callback, writelines drops the batch."""

from time import perf_counter

from bench.micro import fast_pair, fast_requires, register

REQUIRES = fast_requires("outbox") + ("blockx/_fast/errors.py",)
FRAME = b"\x00\x00\x00\xc8" + b"{" + b"x" * 198 + b"}"


class FakeLoop:
    __slots__ = ("pending",)

    def __init__(self):
        self.pending = []

    def call_soon(self, cb, *args, context=None):
        self.pending.append((cb, args))

    def create_future(self):
        raise RuntimeError("the benchmark never waits")


class FakeTransport:
    __slots__ = ("frames",)

    def __init__(self):
        self.frames = 0

    def writelines(self, batch):
        self.frames += len(batch)


def setup():
    cy, py = fast_pair("outbox")
    state = {}
    for label, mod in (("cython", cy), ("python", py)):
        loop, transport = FakeLoop(), FakeTransport()
        state[label] = (mod.Outbox(transport, loop, 256, 64), loop, transport)
    return state


def _run(label):
    def run(state, loops):
        outbox, loop, transport = state[label]
        enqueue = outbox.enqueue
        pending = loop.pending
        frames = [FRAME] * 64
        t0 = perf_counter()
        for _ in range(loops):
            for f in frames:
                enqueue(f)
            while pending:
                cb, args = pending.pop()
                cb(*args)
        elapsed = perf_counter() - t0
        if transport.frames != 64 * loops or len(outbox):
            raise AssertionError("outbox did not flush every frame in one batch")
        transport.frames = 0
        return elapsed
    return run


register("outbox enqueue+flush 64 frames", setup, _run("cython"), _run("python"),
         requires=REQUIRES)
