"""`python -m bench.micro [--fast] [--check] [--bench SUBSTR|=NAME]... [--list] [pyperf options]`

Runs every registered benchmark twice, compiled and twin, each in pyperf worker
processes, then prints one line per benchmark:

    readyqueue push/pop: cython 36.2 ns, python 61.5 ns, 1.7x

--fast uses pyperf's fast mode with fewer processes and a shorter minimum time
per value (the CI budget: the whole run stays well under 2 minutes on 2 cores).

--check exits 1 if a compiled path is slower than its twin; it is the only
performance assertion in CI. "Slower" must survive the noise of a shared
2-core machine, where the two sides of a pair run one after the other: the
compiled mean must exceed the twin's by more than CHECK_TOLERANCE with Welch's
t above T_THRESHOLD, and then again in each of CONFIRM_RUNS fresh runs of that
pair with the order swapped (twin first). A burst of load from another process
hits one side once; a real regression shows every time. A benchmark that
crashes exits 2.

How a worker knows its environment: pyperf starts each worker with
--worker-task=N (the index of the benchmark in run order). This module reads N
before anything imports blockx, and for the twin side of a twin_env benchmark
sets BLOCKX_NO_EXTENSIONS=1, exactly as a user would.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile

import pyperf

from bench.micro import REPO_ROOT, discover, matches, variants

CHECK_TOLERANCE = 1.10
T_THRESHOLD = 3.0
CONFIRM_RUNS = 2


def _pre_parse(argv):
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--worker", action="store_true")
    p.add_argument("--worker-task", type=int, default=None)
    p.add_argument("--bench", action="append", default=[])
    p.add_argument("--fast", action="store_true")
    p.add_argument("--twin-first", action="store_true")
    return p.parse_known_args(argv)[0]


def _fmt(seconds: float) -> str:
    for unit, scale in (("ns", 1e9), ("us", 1e6), ("ms", 1e3)):
        v = seconds * scale
        if v < 1000:
            return f"{v:#.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return f"{seconds:.3g} s"


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


def _confirm(name: str, fast: bool) -> tuple[bool, str]:
    """Re-run one pair, twin first, in a fresh master; (still slower?, summary)."""
    with tempfile.TemporaryDirectory(prefix="bench-micro-") as tmp:
        out = os.path.join(tmp, "confirm.json")
        cmd = [sys.executable, "-m", "bench.micro", "--bench", "=" + name, "--twin-first",
               "--quiet", "--output", out] + (["--fast"] if fast else [])
        proc = subprocess.run(cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL)
        if proc.returncode not in (0, 1) or not os.path.exists(out):
            return True, f"confirmation run failed (exit {proc.returncode})"
        suite = pyperf.BenchmarkSuite.load(out)
        c = suite.get_benchmark(f"{name} [cython]")
        p = suite.get_benchmark(f"{name} [python]")
        return (_significantly_slower(c, p),
                f"cython {_fmt(c.mean())}, python {_fmt(p.mean())}")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = _pre_parse(argv)
    benches = discover()
    selected = [b for b in benches if not b.missing() and matches(b.name, pre.bench)]
    runs = variants(selected, pre.twin_first)

    if pre.worker and pre.worker_task is not None and pre.worker_task < len(runs):
        # Decide the implementation before anything imports blockx._fast.
        if runs[pre.worker_task].twin_env:
            os.environ["BLOCKX_NO_EXTENSIONS"] = "1"
        else:
            os.environ.pop("BLOCKX_NO_EXTENSIONS", None)

    if not pre.worker:
        # Workers run `python -m bench.micro` from any directory.
        paths = [REPO_ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))

    def forward(cmd, args):
        # Workers must rebuild the same run order to map --worker-task.
        for f in args.bench:
            cmd.extend(("--bench", f))
        if args.twin_first:
            cmd.append("--twin-first")

    if pre.fast:
        runner = pyperf.Runner(processes=6, min_time=0.03, program_args=("-m", "bench.micro"),
                               add_cmdline_args=forward)
    else:
        runner = pyperf.Runner(processes=10, program_args=("-m", "bench.micro"),
                               add_cmdline_args=forward)
    ap = runner.argparser
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if a compiled path is (confirmed) slower than its twin")
    ap.add_argument("--bench", action="append", default=[], metavar="SUBSTR",
                    help="only benchmarks whose name contains SUBSTR, or is exactly NAME "
                         "when given as =NAME (repeatable)")
    ap.add_argument("--twin-first", action="store_true",
                    help="run the twin side of each pair first")
    ap.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    if pre.fast and not pre.worker and not any(a in ("-v", "--verbose", "-q", "--quiet")
                                               for a in argv):
        argv.append("--quiet")  # CI: results only, not pyperf's stability advice
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
            if b.missing() and matches(b.name, args.bench):
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
    suspects = []
    for b in selected:
        c = results.get(f"{b.name} [cython]")
        p = results.get(f"{b.name} [python]")
        if c is None or p is None:
            continue
        cm, pm = c.mean(), p.mean()
        note = "" if b.check else "  (not checked: no compiled hot path of its own)"
        print(f"  {b.name}: cython {_fmt(cm)}, python {_fmt(pm)}, {pm / cm:.1f}x{note}")
        if b.check and _significantly_slower(c, p):
            suspects.append((b.name, f"cython {_fmt(cm)}, python {_fmt(pm)}"))
    if errors:
        print("\nbenchmarks that failed:", file=sys.stderr)
        for e in errors:
            print(f"  {e}", file=sys.stderr)

    slower = []
    if args.check:
        for name, first in suspects:
            runs_seen = [first]
            confirmed = True
            for _ in range(CONFIRM_RUNS):
                print(f"confirming {name!r} (compiled looked slower: {runs_seen[-1]}) ...",
                      flush=True)
                still, summary = _confirm(name, args.fast)
                runs_seen.append(summary)
                if not still:
                    confirmed = False
                    print(f"  not confirmed: {summary} (noise)")
                    break
            if confirmed:
                slower.append(f"{name}: " + "; ".join(runs_seen))
        if slower:
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
