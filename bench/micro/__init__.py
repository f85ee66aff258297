"""pyperf microbenchmarks: every hot path, compiled vs its pure-Python twin.

Adding a benchmark = adding one module `bench/micro/bench_<name>.py` that calls
`register(name, setup, compiled_fn, twin_fn)` at import time:

- setup() -> state runs once, lazily, inside the pyperf worker process that
  times the benchmark (never in the master, never inside the timed region);
- compiled_fn(state, loops) / twin_fn(state, loops) run the operation `loops`
  times and return the elapsed seconds (pyperf "time functions"), so a
  benchmark can keep per-iteration resets out of the measurement;
- twin_env=True runs the twin side in a worker started with
  BLOCKX_NO_EXTENSIONS=1 (for code that picks its implementation through
  blockx._fast.load(), e.g. the cores); compiled_fn and twin_fn may then be the
  same function;
- requires=(paths relative to the repo root) skips the benchmark while the code
  it measures does not exist yet;
- check=False reports the ratio but leaves the benchmark out of --check: for
  code that has no compiled hot path of its own, where parity is expected and
  only run-to-run noise could make "compiled" look slower.

Rule for bench modules: do not import blockx at module level. The worker
decides BLOCKX_NO_EXTENSIONS before anything imports blockx._fast, which reads
it once at import.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TimeFn = Callable[[Any, int], float]



def sides(run: TimeFn) -> tuple[TimeFn, TimeFn]:
    """(compiled_fn, twin_fn) for a twin_env benchmark whose state carries
    "twins" (blockx._fast.NO_EXTENSIONS in the worker that set it up): each
    side runs `run` and refuses to measure the wrong build."""
    def side(expect_twins: bool) -> TimeFn:
        def timed(state, loops):
            if state["twins"] != expect_twins:
                raise RuntimeError(f"expected BLOCKX_NO_EXTENSIONS={int(expect_twins)} in this worker")
            return run(state, loops)
        return timed
    return side(False), side(True)

@dataclass
class Bench:
    name: str
    setup: Callable[[], Any]
    compiled_fn: TimeFn
    twin_fn: TimeFn
    twin_env: bool = False
    requires: tuple = ()
    check: bool = True
    module: str = ""

    def missing(self) -> list[str]:
        return [p for p in self.requires if not os.path.exists(os.path.join(REPO_ROOT, p))]


@dataclass
class Variant:
    """One pyperf benchmark: one side of a Bench."""
    bench: Bench
    label: str  # "cython" | "python"
    fn: TimeFn
    twin_env: bool
    state: list = field(default_factory=list)  # lazily built [state]

    @property
    def pyperf_name(self) -> str:
        return f"{self.bench.name} [{self.label}]"

    def time(self, loops: int) -> float:
        if not self.state:
            self.state.append(self.bench.setup())
        return self.fn(self.state[0], loops)


_REGISTRY: list[Bench] = []


def register(name: str, setup: Callable[[], Any], compiled_fn: TimeFn, twin_fn: TimeFn, *,
             twin_env: bool = False, requires: tuple = (), check: bool = True) -> None:
    if any(b.name == name for b in _REGISTRY):
        raise ValueError(f"duplicate benchmark name {name!r}")
    _REGISTRY.append(Bench(name, setup, compiled_fn, twin_fn, twin_env, tuple(requires), check))


def discover() -> list[Bench]:
    """Import every bench_*.py module (sorted, so the order is the same in the
    master and in every worker) and return the registered benchmarks."""
    if not _REGISTRY:
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            if info.name.startswith("bench_"):
                before = len(_REGISTRY)
                importlib.import_module(f"{__name__}.{info.name}")
                for b in _REGISTRY[before:]:
                    b.module = info.name
    return list(_REGISTRY)


def variants(benches: list[Bench], twin_first: bool = False) -> list[Variant]:
    """The pyperf benchmarks in run order: compiled then twin per Bench, or
    twin then compiled (confirmation runs swap the order to cancel drift)."""
    out = []
    for b in benches:
        pair = [Variant(b, "cython", b.compiled_fn, False),
                Variant(b, "python", b.twin_fn, b.twin_env)]
        out.extend(reversed(pair) if twin_first else pair)
    return out


def matches(name: str, filters: list[str]) -> bool:
    """--bench filters: a substring of the name, or "=NAME" for exactly NAME."""
    if not filters:
        return True
    return any(name == f[1:] if f.startswith("=") else f in name for f in filters)


def fast_pair(name: str):
    """(compiled module, twin module) of hot module blockx._fast.<name>,
    imported directly (independent of BLOCKX_NO_EXTENSIONS)."""
    return (importlib.import_module(f"blockx._fast.{name}"),
            importlib.import_module(f"blockx._fast.{name}_py"))


def fast_requires(name: str) -> tuple:
    return (f"blockx/_fast/{name}.pyx", f"blockx/_fast/{name}_py.py")
