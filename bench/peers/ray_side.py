"""The Ray side of `make bench-peers`, run by the peers venv's Python (Ray installed,
BlockX not): one Ray instance on this host, driven by JSON lines on stdin.

Each request {"system": "ray_task" | "ray_actor", "n": N, "inflight": K} runs N
trivial one-call jobs (x -> x + 1), K in flight (K = 1: sequential, each result
awaited before the next call), checks every result and answers one JSON line:
{"tasks_per_s", "seconds", "cpu_s"}, where cpu_s is the CPU time that Ray's own
processes (every descendant of this driver: GCS, raylet, workers) spent meanwhile,
beside the driver's own. ``ray_actor`` calls go round-robin to as many actors as
the instance has CPUs, as the Worker's calls go to its executors.

Only the standard library and Ray: this file is never imported by BlockX."""
from __future__ import annotations

import json
import os
import sys
import time

import ray

CLK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / CLK


def descendants_cpu(root: int) -> float:
    """CPU seconds of every live descendant of ``root`` (not ``root`` itself)."""
    parent, cpu = {}, {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                parent[int(name)], cpu[int(name)] = st
    total = 0.0
    for pid in cpu:
        p = parent.get(pid)
        while p and p != root:
            p = parent.get(p)
        if p == root and pid != root:
            total += cpu[pid]
    return total


@ray.remote
def add1(x: int) -> int:
    return x + 1


@ray.remote
class Adder:
    def add1(self, x: int) -> int:
        return x + 1


def run(submit, n: int, inflight: int) -> None:
    if inflight <= 1:
        for i in range(n):
            got = ray.get(submit(i))
            if got != i + 1:
                raise RuntimeError(f"call {i} returned {got!r}")
        return
    pending = {}
    it = iter(range(n))
    for i in it:
        pending[submit(i)] = i
        if len(pending) >= inflight:
            break
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        more, _ = ray.wait([r for r in pending if r not in ready], num_returns=len(pending) - len(ready),
                           timeout=0)
        for ref in ready + more:
            i = pending.pop(ref)
            got = ray.get(ref)
            if got != i + 1:
                raise RuntimeError(f"call {i} returned {got!r}")
            nxt = next(it, None)
            if nxt is not None:
                pending[submit(nxt)] = nxt


def main() -> int:
    cpus = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    for attempt in range(3):        # Ray gives its raylet 30 s to register: a loaded machine may need more
        try:
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
            break
        except Exception as exc:  # noqa: BLE001 - "The current node timed out during startup"
            print(f"ray.init failed ({exc}); attempt {attempt + 1} of 3", file=sys.stderr, flush=True)
            ray.shutdown()
            if attempt == 2:
                raise
    actors = [Adder.remote() for _ in range(cpus)]
    turn = [0]

    def actor_submit(i: int):
        turn[0] += 1
        return actors[turn[0] % len(actors)].add1.remote(i)

    submitters = {"ray_task": add1.remote, "ray_actor": actor_submit}
    for submit in submitters.values():           # workers started, code shipped: not measured
        run(submit, 400, 64)
        run(submit, 20, 1)
    me = os.getpid()
    print(json.dumps({"ready": True, "ray": ray.__version__}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        submit = submitters[req["system"]]
        c0, d0, t0 = descendants_cpu(me), time.process_time(), time.perf_counter()
        run(submit, req["n"], req["inflight"])
        t1 = time.perf_counter()
        secs = t1 - t0
        print(json.dumps({"tasks_per_s": round(req["n"] / secs, 1), "seconds": round(secs, 4),
                          "cpu_s": {"server": round(descendants_cpu(me) - c0, 3),
                                    "client": round(time.process_time() - d0, 3)}}), flush=True)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
