"""`python -m bench.micro [--fast] [--check] [--bench SUBSTR]... [--list] [pyperf options]`

Runs every registered benchmark twice, compiled and twin, each in pyperf worker
processes, then prints one line per benchmark:

    readyqueue push/pop: cython 41.0 ns, python 212 ns, 5.2x

--fast uses pyperf's fast mode with fewer processes and a shorter minimum time
per value (the CI budget: the whole run stays well under 2 minutes on 2 cores).
--check exits 1 if any compiled path is slower than its twin (mean more than
10% slower AND statistically significant, so noise alone does not fail CI);
it is the only performance assertion in CI. A benchmark that crashes exits 2.

How a worker knows its environment: pyperf starts each worker with
--worker-task=N (the index of the benchmark in registration order). This
module reads N before anything imports blockx, and for the twin side of a
twin_env benchmark sets BLOCKX_NO_EXTENSIONS=1, exactly as a user would.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys

from bench.micro import REPO_ROOT, discover, variants


def _pre_parse(argv):
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--worker", action="store_true")
    p.add_argument("--worker-task", type=int, default=None)
    p.add_argument("--bench", action="append", default=[])
    p.add_argument("--fast", action="store_true")
    return p.parse_known_args(argv)[0]


def _selected(benches, filters):
    out = []
    for b in benches:
        if b.missing():
            continue
        if filters and not any(f in b.name for f in filters):
            continue
        out.append(b)
    return out


def _fmt(seconds: float) -> str:
    for unit, scale in (("ns", 1e9), ("us", 1e6), ("ms", 1e3)):
        v = seconds * scale
        if v < 1000:
            return f"{v:#.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return f"{seconds:.3g} s"


# "Slower" for --check: the compiled mean exceeds the twin's by more than this
# factor AND Welch's t-test says the difference is not noise. The tolerance
# absorbs drift between the two sides' runs on a shared 2-core machine (they
# run one after the other), which matters for memory-bound benchmarks where
# both sides are at parity by nature (e.g. copying a 4 MiB sidecar).
CHECK_TOLERANCE = 1.10
T_THRESHOLD = 3.0


def _significantly_slower(compiled, twin) -> bool:
    a, b = compiled.get_values(), twin.get_values()
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    if ma <= mb * CHECK_TOLERANCE:
        return False
    if len(a) < 2 or len(b) < 2:
        return True
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    if se == 0:
        return True
    return (ma - mb) / se > T_THRESHOLD


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    pre = _pre_parse(argv)
    benches = discover()
    selected = _selected(benches, pre.bench)
    runs = variants(selected)

    if pre.worker and pre.worker_task is not None and pre.worker_task < len(runs):
        # Decide the implementation before anything imports blockx._fast.
        if runs[pre.worker_task].twin_env:
            os.environ["BLOCKX_NO_EXTENSIONS"] = "1"
        else:
            os.environ.pop("BLOCKX_NO_EXTENSIONS", None)

    import pyperf

    if not pre.worker:
        # Workers run `python -m bench.micro` from any directory.
        paths = [REPO_ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))

    def forward(cmd, args):
        for f in args.bench:
            cmd.extend(("--bench", f))

    if pre.fast:
        runner = pyperf.Runner(processes=6, min_time=0.03, program_args=("-m", "bench.micro"),
                               add_cmdline_args=forward)
    else:
        runner = pyperf.Runner(processes=10, program_args=("-m", "bench.micro"),
                               add_cmdline_args=forward)
    ap = runner.argparser
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if a compiled path is significantly slower than its twin")
    ap.add_argument("--bench", action="append", default=[], metavar="SUBSTR",
                    help="only benchmarks whose name contains SUBSTR (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    if pre.fast and not pre.worker and not any(a in ("-v", "--verbose", "-q", "--quiet")
                                               for a in argv):
        argv = [*argv, "--quiet"]  # CI: results only, not pyperf's stability advice
    args = runner.parse_args(argv)

    if not args.worker:
        if args.list:
            for b in benches:
                missing = b.missing()
                note = f"  (skipped: missing {', '.join(missing)})" if missing else ""
                env = "  [twin side under BLOCKX_NO_EXTENSIONS=1]" if b.twin_env else ""
                unchecked = "  [not in --check]" if not b.check else ""
                print(f"{b.name}{env}{unchecked}{note}  <- bench/micro/{b.module}.py")
            return 0
        for b in benches:
            if b.missing() and (not args.bench or any(f in b.name for f in args.bench)):
                print(f"skipped {b.name!r}: missing {', '.join(b.missing())}", file=sys.stderr)
        if not runs:
            print("no benchmark selected", file=sys.stderr)
            return 2

    results = {}
    errors = []
    for v in runs:
        try:
            res = runner.bench_time_func(v.pyperf_name, v.time)
        except RuntimeError as exc:  # a worker crashed; its traceback went to stderr
            if args.worker:
                raise
            errors.append(f"{v.pyperf_name}: {exc}")
            runner._worker_task += 1  # keep task numbering aligned with the workers
            continue
        if res is not None:
            results[v.pyperf_name] = res

    if args.worker:
        return 0

    print()
    print("compiled vs twin (mean time per operation):")
    slower = []
    for b in selected:
        c = results.get(f"{b.name} [cython]")
        p = results.get(f"{b.name} [python]")
        if c is None or p is None:
            continue
        cm, pm = c.mean(), p.mean()
        note = "" if b.check else "  (not checked: no compiled hot path of its own)"
        print(f"  {b.name}: cython {_fmt(cm)}, python {_fmt(pm)}, {pm / cm:.1f}x{note}")
        if b.check and _significantly_slower(c, p):
            slower.append(f"{b.name}: cython {_fmt(cm)} > python {_fmt(pm)}")
    if errors:
        print("\nbenchmarks that failed:", file=sys.stderr)
        for e in errors:
            print(f"  {e}", file=sys.stderr)
    if args.check and slower:
        print("\nFAIL: compiled path slower than its pure-Python twin:", file=sys.stderr)
        for s in slower:
            print(f"  {s}", file=sys.stderr)
        return 1
    if errors:
        return 2
    if args.check:
        print("check passed: every compiled path is at least as fast as its twin")
    return 0


if __name__ == "__main__":
    sys.exit(main())
