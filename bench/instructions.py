"""Instructions per operation of the Worker and of its executors, counted by
callgrind: `make bench-instructions` or `.venv/bin/python bench/instructions.py
[--only a,d,io,b,bs,bf,c,cs] [--calls N] [--subcalls-per-parent N] [--tasks N] [--root DIR]`.

Why: these machines are small and shared, and their speed drifts by up to 2x
within an hour, so a change of 5-10% in CPU per call is lost in the noise of
`make bench` unless many alternating rounds are run. An instruction count does
not depend on what else the machine is doing: the same build, inputs and
environment give the same count within ~0.5%, so two builds can be compared
in one run each. It counts instructions, not time (a cache miss costs nothing
here): use it to compare builds, and `make bench` for the figures.

How: the real `python -m blockx serve` (2 executors over the Unix socket, etcd
off) runs under `valgrind --tool=callgrind --trace-children=yes
--instr-atstart=no`; after a warm-up, counting is switched on in the Worker and
in each executor (`callgrind_control -i on`) for the measured scenario only:
(a) one callList task of `--calls` trivial calls, (d) 100 parents making
`--subcalls-per-parent` sequential subcalls each, (io) the same with IO round
trips, (b) `--tasks` one-call tasks over the unary contract (SubmitTask, then
WatchTasks to the terminal update, as `make bench` (b) does), (bs) the same tasks
over one TaskSession, (bf) the (b) tasks against bench/peers/grpc_floor.py, a
WorkerService that answers the same RPCs with the same messages and does no work
(grpc.aio's own cost of the unary contract, the floor under (b)), (c) and (cs)
the (b) and (bs) tasks one at a time, each awaited before the next (make bench's
(c) and (l): a lone task's cost, nothing shared with others). `--root DIR` runs
the Worker of another checkout (its extensions built): the same count for a
baseline build, to compare with this one's. Everything runs ~50x slower under callgrind, so a read brings larger
batches of frames than at full speed: per-read costs weigh less here than in
`make bench`. Prints one JSON object: instructions per op for the Worker and
for the executors together."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.e2e import harness, scenarios as sc  # noqa: E402
from bench.e2e.client import Client  # noqa: E402


class CallgrindWorker(harness.BenchWorker):
    """A BenchWorker whose process (and its executors) run under callgrind."""

    def __init__(self, out_prefix: str, **kw) -> None:
        super().__init__(**kw)
        self.out_prefix = out_prefix

    def start(self, timeout: float = 600.0):
        real = subprocess.Popen
        prefix = ["valgrind", "--tool=callgrind", "--trace-children=yes", "--instr-atstart=no",
                  f"--callgrind-out-file={self.out_prefix}.%p"]

        def popen(cmd, **kw):
            return real(prefix + list(cmd), **kw)

        harness.subprocess.Popen = popen
        try:
            return super().start(timeout)
        finally:
            harness.subprocess.Popen = real


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def _instrument(pids: list[int], on: bool) -> None:
    for pid in pids:
        subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(pid)],
                       capture_output=True, check=True)


def _total(path: str) -> int:
    out = subprocess.run(["callgrind_annotate", path], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if "PROGRAM TOTALS" in line:
            return int(line.split()[0].replace(",", ""))
    raise RuntimeError(f"no PROGRAM TOTALS in callgrind_annotate {path}")


async def _scenario(client: Client, w: harness.BenchWorker, which: str, n: int, timeout: float) -> int:
    """Run one scenario of `n` calls, of 100 parents with `n` subcalls / IO round
    trips each, or of `n` one-call tasks; return how many operations it made."""
    if which == "b":
        await sc.task_throughput(client, n, 64, 192, 128, 20.0, timeout=timeout)
        return n
    if which == "bs":
        await sc.session_task_throughput(w.addr, n, 64, timeout=timeout, token=w.token)
        return n
    if which == "c":
        await sc.latency(client, n, timeout=timeout)
        return n
    if which == "cs":
        await sc.session_latency(w.addr, n, timeout=timeout, token=w.token)
        return n
    if which == "a":
        await sc.call_throughput(client, n, timeout=timeout)
        return n
    rate = sc.subcall_rate if which == "d" else sc.io_rate
    await rate(client, 100, n, timeout=timeout)
    return 100 * n


async def measure_floor(args, tmp: str) -> dict:
    """(bf): the (b) tasks against the no-work WorkerService, under callgrind."""
    prefix = os.path.join(tmp, "cg-bf")
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                             f"--callgrind-out-file={prefix}.%p", sys.executable, "-m", "bench.peers.grpc_floor"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = int(await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 300))
        client = Client(f"127.0.0.1:{port}")
        try:
            await _floor_tasks(client, max(5, args.tasks // 5), args.timeout)    # warm-up, not counted
            _instrument([proc.pid], True)
            await _floor_tasks(client, args.tasks, args.timeout)
            _instrument([proc.pid], False)
        finally:
            await client.close()
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 120)
    return {"ops": args.tasks, "worker_instructions_per_op": round(_total(f"{prefix}.{proc.pid}") / args.tasks)}


async def _floor_tasks(client: Client, n: int, timeout: float) -> None:
    await sc.task_throughput(client, n, 64, 192, 128, 20.0, timeout=timeout)


async def measure(which: str, args, tmp: str) -> dict:
    if which == "bf":
        return await measure_floor(args, tmp)
    prefix = os.path.join(tmp, f"cg-{which}")
    # Callgrind opens its output file as the executor starts (as root): an executor
    # that then left root for EXECUTOR_USER could not write its counts.
    w = CallgrindWorker(prefix, executors=2, env={"EXECUTOR_USER": "root", **args.worker_env}, root=args.root)
    await asyncio.to_thread(w.start)
    client = Client(w.addr, w.token)
    n = {"a": args.calls, "b": args.tasks, "bs": args.tasks, "c": args.tasks, "cs": args.tasks}.get(
        which, args.subcalls_per_parent)
    try:
        await sc.warm_up(client, ["add1", "subcall_loop", "io_loop"])
        await _scenario(client, w, which, max(5, n // 5), args.timeout)     # warm-up, not counted
        executors = _children(w.pid)
        pids = [w.pid] + executors
        _instrument(pids, True)
        ops = await _scenario(client, w, which, n, args.timeout)
        _instrument(pids, False)
    finally:
        await client.close()
        await asyncio.to_thread(w.stop)
        w.cleanup()
    worker = _total(f"{prefix}.{w.pid}")
    execs = sum(_total(f"{prefix}.{pid}") for pid in executors)
    return {"ops": ops, "executors": len(executors),
            "worker_instructions_per_op": round(worker / ops),
            "executor_instructions_per_op": round(execs / ops)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="a,d,io", help="scenarios: a (calls), d (subcalls), io, "
                    "b (unary tasks), bs (session tasks), bf (b against a no-work gRPC server), "
                    "c / cs (b / bs one task at a time)")
    ap.add_argument("--calls", type=int, default=20000, help="calls of the (a) task")
    ap.add_argument("--subcalls-per-parent", type=int, default=100,
                    help="sequential subcalls (or IO round trips) of each of the 100 parents")
    ap.add_argument("--tasks", type=int, default=1000, help="one-call tasks of (b), (bs), (c) and (cs)")
    ap.add_argument("--root", metavar="DIR", default=None,
                    help="run the Worker of the checkout DIR (its extensions built; default: this one)")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--keep", metavar="DIR",
                    help="write the callgrind files to DIR and keep them (callgrind_annotate DIR/cg-b.PID "
                         "shows where the instructions go); default: a temporary directory, removed")
    ap.add_argument("--worker-env", action="append", default=[], metavar="NAME=VALUE",
                    help="a setting of the measured Worker (repeatable), e.g. TRACE_ENABLED=false: "
                         "what one feature costs per op")
    args = ap.parse_args()
    env = {}
    for item in args.worker_env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            ap.error(f"--worker-env takes NAME=VALUE, got {item!r}")
        env[name] = value
    args.worker_env = env
    which = [w.strip() for w in args.only.split(",") if w.strip()]
    bad = [w for w in which if w not in ("a", "d", "io", "b", "bs", "bf", "c", "cs")]
    if bad:
        ap.error(f"unknown scenario(s) {', '.join(bad)}: choose from a, d, io, b, bs, bf, c, cs")
    if args.root:
        args.root = os.path.abspath(args.root)
    missing = [t for t in ("valgrind", "callgrind_control", "callgrind_annotate") if not shutil.which(t)]
    if missing:
        print(f"bench/instructions.py needs {', '.join(missing)} (Debian package valgrind)", file=sys.stderr)
        return 2
    tmp = args.keep or tempfile.mkdtemp(prefix="blockx-callgrind-")
    os.makedirs(tmp, exist_ok=True)
    try:
        results = {w: asyncio.run(measure(w, args, tmp)) for w in which}
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({"results": results, "calls": args.calls, "worker_env": args.worker_env,
                      "subcalls_per_parent": args.subcalls_per_parent, "tasks": args.tasks,
                      "root": args.root or str(ROOT)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
