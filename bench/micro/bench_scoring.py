"""Executor selection: one select_executor over 8 / 128 / 1024 views, scoring
all eligible views (sample 0) or the first 8 (sample 8). About one view in
eight is filtered out, the rest spread over a few load levels, as in a busy
pool; every filter is active so each view pays the full filter chain."""

import random
from time import perf_counter

from bench.micro import fast_pair, fast_requires, register

NOW = 1_000_000
LIMITS = dict(max_runnable=64, max_inflight=64, memory_high_watermark=1 << 34,
              stall_timeout_ms=10_000)


def _views(mod, n):
    rnd = random.Random(n)
    out = []
    for i in range(n):
        v = mod.ExecutorView(f"exec-{i}")
        v.healthy = rnd.random() > 0.06
        v.runnable = rnd.randrange(0, 8)
        v.local_inflight = rnd.randrange(0, 8)
        v.usable_contexts = rnd.randrange(4, 16)
        v.memory_bytes = rnd.randrange(1 << 28, 1 << 31)
        v.last_scheduler_active_at_ms = NOW - rnd.randrange(0, 2000)
        v.running_call_id = "call" if rnd.random() < 0.5 else ""
        out.append(v)
    return out


def _setup(n):
    def setup():
        cy, py = fast_pair("scoring")
        return {"cython": (cy.select_executor, _views(cy, n)),
                "python": (py.select_executor, _views(py, n))}
    return setup


def _run(label, sample):
    mr, mi, mem, st = (LIMITS["max_runnable"], LIMITS["max_inflight"],
                       LIMITS["memory_high_watermark"], LIMITS["stall_timeout_ms"])

    def run(state, loops):
        select, views = state[label]
        t0 = perf_counter()
        for _ in range(loops):
            select(views, NOW, sample, mr, mi, mem, st)
        return perf_counter() - t0
    return run


for _n in (8, 128, 1024):
    for _sample in (0, 8):
        register(f"scoring select {_n} views sample {_sample}", _setup(_n),
                 _run("cython", _sample), _run("python", _sample),
                 requires=fast_requires("scoring"))
