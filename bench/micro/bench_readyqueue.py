"""Ready queue: one push + one pop on a queue holding 16 calls (the steady
state of a task whose dispatcher keeps up), and a retry (push_front + pop)."""

from time import perf_counter

from bench.micro import fast_pair, fast_requires, register


def setup():
    cy, py = fast_pair("readyqueue")
    item = object()
    queues = {}
    for label, mod in (("cython", cy), ("python", py)):
        q = mod.ReadyQueue()
        for _ in range(16):
            q.push(item)
        queues[label] = q
    return queues, item


def _push_pop(label):
    def run(state, loops):
        queues, item = state
        q = queues[label]
        push, pop = q.push, q.pop
        t0 = perf_counter()
        for _ in range(loops):
            push(item)
            pop()
        return perf_counter() - t0
    return run


def _retry(label):
    def run(state, loops):
        queues, item = state
        q = queues[label]
        push_front, pop = q.push_front, q.pop
        t0 = perf_counter()
        for _ in range(loops):
            push_front(item)
            pop()
        return perf_counter() - t0
    return run


register("readyqueue push/pop", setup, _push_pop("cython"), _push_pop("python"),
         requires=fast_requires("readyqueue"))
register("readyqueue push_front/pop", setup, _retry("cython"), _retry("python"),
         requires=fast_requires("readyqueue"))
