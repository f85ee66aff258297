"""`make bench-peers`: this Worker beside Ray on the same trivial one-call jobs.

Workloads, each job `add1(x) = x + 1`, checked:
- ``inflight``: ``--tasks`` jobs, 64 in flight (``--inflight``);
- ``sequential``: ``--seq-tasks`` jobs, each awaited before the next.
Systems:
- ``unary``: this Worker's unary contract, as a Coordinator written against the
  spec drives it (SubmitTask, then WatchTasks to the terminal update; make bench's
  (b) and (c));
- ``session``: the same jobs over one TaskSession (blockx.client);
- ``ray_task`` / ``ray_actor``: Ray tasks, and calls round-robin to one actor per
  CPU, on one local Ray instance with as many CPUs as the Worker has executors
  (bench/peers/ray_side.py, run by the peers venv's Python, where Ray is installed);
- ``unary_linger``: the unary contract against a second Worker started with
  SUBMIT_LINGER_MS=``--linger-ms`` (default 4; 0 leaves it out): tasks that
  arrive close together while others run start together;
- ``grpc_floor``: the unary contract against bench/peers/grpc_floor.py, a
  WorkerService that does no work (grpc.aio's own cost of the pattern).
Once a round, bench/peers/uds_floor.py measures the CPU of one executor round
trip that does no work (a uvloop Protocol and a poll loop over a Unix socket, one
call in flight, as each unary call reaches its executor alone). The report's
``floor`` adds it to the floor's CPU per job: the floor under a one-call unary
task (gRPC's own cost plus one round trip to an executor), beside the unary
path's own figure.
Every system stays up for the whole run; each round runs every workload on every
system, in an order that rotates from round to round, so a drift of the shared
machine's speed falls on all of them alike. Figures per run: jobs/s, and the CPU
the serving side spent per job (the Worker and its executors; Ray's GCS, raylet
and workers; the floor's process), read from /proc. The medians over the rounds,
and their ratios, go to stdout as one JSON object, and a short table to stderr.
`--no-ray` leaves Ray out (the Worker's parts and the floor alone). `--baseline DIR`
adds a second Worker run from another checkout (its extensions and generated code
built, e.g. a `git worktree` of main), as ``unary_base`` and ``session_base``: a
before/after of the same run."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

import uvloop

from bench.e2e import scenarios as sc
from bench.e2e.client import Client
from bench.e2e.harness import ROOT, BenchWorker, proc_cpu_seconds

WORKLOADS = ("inflight", "sequential")
RAY_SYSTEMS = ("ray_task", "ray_actor")
RATIOS = (("unary", "ray_task"), ("unary", "ray_actor"), ("session", "ray_task"), ("session", "ray_actor"),
          ("unary", "session"), ("unary", "grpc_floor"), ("unary", "unary_base"), ("session", "session_base"),
          ("unary_base", "ray_task"), ("unary_linger", "ray_task"), ("unary_linger", "unary"))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/bench_peers.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    p.add_argument("--tasks", type=int, default=3000, help="jobs of the in-flight workload (default 3000)")
    p.add_argument("--inflight", type=int, default=64, help="jobs in flight (default 64)")
    p.add_argument("--seq-tasks", type=int, default=300, help="jobs of the sequential workload (default 300)")
    p.add_argument("--executors", type=int, default=2,
                   help="the Worker's EXECUTOR_COUNT, and the CPUs (and actors) of the Ray instance (default 2)")
    p.add_argument("--ray-python", default=str(ROOT / ".bench-peers-venv" / "bin" / "python"),
                   help="a Python with Ray installed (default: .bench-peers-venv, which `make bench-peers` creates)")
    p.add_argument("--no-ray", action="store_true", help="leave Ray out")
    p.add_argument("--baseline", metavar="DIR",
                   help="also run a Worker from the checkout DIR (unary_base, session_base), side by side")
    p.add_argument("--linger-ms", type=int, default=4,
                   help="SUBMIT_LINGER_MS of the unary_linger Worker (default 4; 0 leaves it out)")
    p.add_argument("--uds-round-trips", type=int, default=20000,
                   help="round trips of the executor-socket floor, once a round (default 20000)")
    p.add_argument("--timeout", type=float, default=300.0, help="bound of each run in seconds")
    ns = p.parse_args(argv)
    ns.ray_python = os.path.abspath(ns.ray_python)     # the Ray side runs in another directory
    if ns.linger_ms < 0:
        p.error("--linger-ms must be at least 0")
    if min(ns.rounds, ns.tasks, ns.seq_tasks, ns.inflight, ns.executors, ns.uds_round_trips) < 1:
        p.error("--rounds, --tasks, --seq-tasks, --inflight, --executors and --uds-round-trips must be at least 1")
    return ns


class RaySide:
    """bench/peers/ray_side.py in a process of its own, driven line by line."""

    def __init__(self, python: str, cpus: int) -> None:
        if not os.access(python, os.X_OK):
            raise SystemExit(f"{python} is not an executable Python: run `make bench-peers` (it creates "
                             ".bench-peers-venv with Ray), pass --ray-python, or --no-ray")
        self.proc = subprocess.Popen([python, str(ROOT / "bench" / "peers" / "ray_side.py"), str(cpus)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     stderr=subprocess.DEVNULL, cwd="/tmp", env={**os.environ, "PYTHONPATH": ""})
        self.version = self._read()["ray"]

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the Ray side exited ({self.proc.wait()}) without an answer")
        return json.loads(line)

    def run(self, system: str, n: int, inflight: int) -> dict:
        self.proc.stdin.write(json.dumps({"system": system, "n": n, "inflight": inflight}) + "\n")
        self.proc.stdin.flush()
        out = self._read()
        return {"tasks_per_s": out["tasks_per_s"], "server_cpu_s": out["cpu_s"]["server"],
                "client_cpu_s": out["cpu_s"]["client"]}

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(60)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


class Floor:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.peers.grpc_floor"], cwd=ROOT,
                                     stdout=subprocess.PIPE, text=True)
        self.addr = f"127.0.0.1:{int(self.proc.stdout.readline())}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


async def _measured(cpu, n: int, coro) -> dict:
    c0, p0, t0 = cpu(), time.process_time(), time.perf_counter()
    await coro
    secs = time.perf_counter() - t0
    return {"tasks_per_s": round(n / secs, 1), "server_cpu_s": round(cpu() - c0, 3),
            "client_cpu_s": round(time.process_time() - p0, 3)}


async def _unary(client: Client, n: int, inflight: int, timeout: float) -> None:
    if inflight > 1:
        await sc.task_throughput(client, n, inflight, 192, 128, 20.0, timeout=timeout)
    else:
        await sc.latency(client, n, timeout=timeout)


async def _warm_up(worker: BenchWorker, client: Client, ns, *, session: bool) -> None:
    """The add1 code loaded and a first batch of unary tasks (and session tasks) run."""
    await sc.warm_up(client, ["add1"])
    await sc.task_throughput(client, 500, ns.inflight, 192, 128, 20.0, timeout=ns.timeout)
    if session:
        await sc.session_task_throughput(worker.addr, 500, ns.inflight, timeout=ns.timeout, token=worker.token)


async def _uds_floor(n: int, timeout: float) -> dict:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bench.peers.uds_floor", "--round-trips",
                                                str(n), cwd=ROOT, stdout=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"bench/peers/uds_floor.py exited {proc.returncode}")
    return json.loads(out)


def _floor(median: dict, rounds: list) -> dict:
    """The floor under a one-call unary task, per workload: the gRPC floor's CPU per
    job plus one executor round trip's (the median over the rounds), and the unary
    path's CPU per job over it."""
    uds = round(statistics.median(r["uds_floor"]["cpu_us_per_round_trip"] for r in rounds), 1)
    out: dict = {"uds_round_trip_cpu_us": uds}
    for wl, by in median.items():
        floor = round(by["grpc_floor"]["server_cpu_us_per_task"] + uds, 1)
        unary = by["unary"]["server_cpu_us_per_task"]
        out[wl] = {"unary_floor_cpu_us": floor, "unary_cpu_us": unary,
                   "unary_over_floor": round(unary / floor, 2) if floor > 0 else None}
    return out


async def run(ns) -> dict:
    w = BenchWorker(executors=ns.executors)
    await asyncio.to_thread(w.start)
    floor = Floor()
    ray = base = linger = None
    try:
        if ns.linger_ms:
            linger = BenchWorker(executors=ns.executors, env={"SUBMIT_LINGER_MS": str(ns.linger_ms)})
            await asyncio.to_thread(linger.start)
        if ns.baseline:
            base = BenchWorker(executors=ns.executors, root=os.path.abspath(ns.baseline))
            await asyncio.to_thread(base.start)
        if not ns.no_ray:
            ray = await asyncio.to_thread(RaySide, ns.ray_python, ns.executors)
        client, fclient = Client(w.addr, w.token), Client(floor.addr)
        wcpu = lambda: sum(w.cpu_seconds().values())           # noqa: E731 - the Worker and its executors
        fcpu = lambda: proc_cpu_seconds(floor.proc.pid)         # noqa: E731
        await _warm_up(w, client, ns, session=True)
        await _unary(fclient, 500, ns.inflight, ns.timeout)
        workers = {"": (w, client, wcpu)}
        for suffix, other, session in (("_base", base, True), ("_linger", linger, False)):
            if other is not None:
                ocl = Client(other.addr, other.token)
                workers[suffix] = (other, ocl, lambda o=other: sum(o.cpu_seconds().values()))
                await _warm_up(other, ocl, ns, session=session)

        def job(system: str, n: int, k: int):
            kind, _, suffix = system.partition("_")
            if kind in ("unary", "session") and system != "grpc_floor":
                ww, cl, cpu = workers["_" + suffix if suffix else ""]
                if kind == "unary":
                    return _measured(cpu, n, _unary(cl, n, k, ns.timeout))
                coro = (sc.session_task_throughput(ww.addr, n, k, timeout=ns.timeout, token=ww.token) if k > 1
                        else sc.session_latency(ww.addr, n, timeout=ns.timeout, token=ww.token))
                return _measured(cpu, n, coro)
            if system == "grpc_floor":
                return _measured(fcpu, n, _unary(fclient, n, k, ns.timeout))
            return asyncio.to_thread(ray.run, system, n, k)

        systems = (["unary", "session"] + ([] if base is None else ["unary_base", "session_base"])
                   + ([] if linger is None else ["unary_linger"])
                   + ["grpc_floor"] + ([] if ray is None else list(RAY_SYSTEMS)))
        rounds = []
        for r in range(ns.rounds):
            order = systems[r % len(systems):] + systems[:r % len(systems)]
            row: dict = {"order": order}
            for wl in WORKLOADS:
                n, k = (ns.tasks, ns.inflight) if wl == "inflight" else (ns.seq_tasks, 1)
                row[wl] = {}
                for system in order:
                    out = await job(system, n, k)
                    out["server_cpu_us_per_task"] = round(1e6 * out["server_cpu_s"] / n, 1)
                    row[wl][system] = out
            row["uds_floor"] = await _uds_floor(ns.uds_round_trips, ns.timeout)
            rounds.append(row)
            print(f"round {r + 1}/{ns.rounds}: " + "; ".join(
                f"{wl} " + ", ".join(f"{s} {row[wl][s]['tasks_per_s']:.0f}/s" for s in systems) for wl in WORKLOADS),
                file=sys.stderr, flush=True)
        for _, cl, _ in workers.values():
            await cl.close()
        await fclient.close()
    finally:
        if ray is not None:
            await asyncio.to_thread(ray.close)
        floor.close()
        for worker in (w, base, linger):
            if worker is not None:
                await asyncio.to_thread(worker.stop)
                worker.cleanup()
    median = {wl: {s: {k: round(statistics.median(r[wl][s][k] for r in rounds), 1)
                       for k in ("tasks_per_s", "server_cpu_us_per_task")} for s in systems} for wl in WORKLOADS}
    ratios = {wl: {f"{a}/{b}": round(median[wl][a]["tasks_per_s"] / median[wl][b]["tasks_per_s"], 2)
                   for a, b in RATIOS if a in median[wl] and b in median[wl]} for wl in WORKLOADS}
    return {"bench": "peers", "ray": None if ray is None else ray.version, "cpu_count": os.cpu_count(),
            "loadavg_start_end": None, "sizes": {"tasks": ns.tasks, "inflight": ns.inflight,
                                                "seq_tasks": ns.seq_tasks, "executors": ns.executors},
            "median": median, "ratios": ratios, "floor": _floor(median, rounds), "rounds": rounds}


def table(report: dict) -> str:
    out = [f"{'workload':<11} {'system':<13} {'jobs/s':>9} {'server CPU us/job':>18}"]
    for wl, by in report["median"].items():
        for s, m in by.items():
            out.append(f"{wl:<11} {s:<13} {m['tasks_per_s']:>9.0f} {m['server_cpu_us_per_task']:>18.0f}")
    for wl, rs in report["ratios"].items():
        out.append(f"{wl}: " + ", ".join(f"{k} {v:.2f}x" for k, v in rs.items()))
    fl = report["floor"]
    for wl in report["median"]:
        f = fl[wl]
        out.append(f"{wl}: floor of a one-call unary task {f['unary_floor_cpu_us']:.0f} us CPU (grpc_floor + one "
                   f"executor round trip, {fl['uds_round_trip_cpu_us']:.0f} us); unary {f['unary_cpu_us']:.0f} us, "
                   f"{f['unary_over_floor']}x the floor")
    return "\n".join(out)


def main(argv=None) -> int:
    ns = parse_args(argv)
    load0 = os.getloadavg()
    report = uvloop.run(asyncio.wait_for(run(ns), ns.timeout * 4 * ns.rounds * 10))
    report["loadavg_start_end"] = [round(load0[0], 1), round(os.getloadavg()[0], 1)]
    print(table(report), file=sys.stderr)
    print(json.dumps(report))
    return 0
