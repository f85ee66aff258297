"""The client host of tests/e2e/test_multihost_faults.py: run inside its network
namespace as ``python -m tests.e2e.multihost_client '<json config>'``.

It runs ``n`` tasks through one ``blockx.client.Cluster`` and writes JSON lines
on stdout, each with the wall-clock time ``t`` (the clock the test's fault
times are read from): ``ready`` once every expected worker is placeable,
``registry`` whenever the set of registered workers changes, ``progress``
about four times a second, and at the end ``result``: every outcome the client
got (task id, state, outputs, worker, attempts, when), every placement (worker,
when), and, for each task that was placed on more than one worker, the state
the earlier workers report for it now (a late completion there must not have
become a second outcome here).
"""
from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections import defaultdict

from blockx.client import Cluster, WorkerClient
from blockx.client.errors import BlockxError


def emit(event: str, **fields) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")
    sys.stdout.flush()


async def main(cfg: dict) -> None:
    placements: dict[str, list[tuple[str, float]]] = defaultdict(list)
    cluster = Cluster(cfg["etcd"], max_resubmits=cfg["max_resubmits"], wait_for_worker_s=cfg["wait_for_worker_s"],
                      probe_timeout_s=cfg["probe_timeout_s"],
                      on_placement=lambda addr, tid: placements[tid].append((addr, time.time())))
    outcomes: dict[str, list[dict]] = defaultdict(list)
    async with cluster:
        deadline = time.monotonic() + 60
        while len(cluster.view.placeable()) < cfg["workers"]:
            if time.monotonic() > deadline:
                emit("error", message=f"only {sorted(cluster.workers)} registered")
                return
            await asyncio.sleep(0.02)
        emit("ready", workers=sorted(cluster.workers))

        async def registry() -> None:
            last: list[str] = []
            while True:
                now = sorted(cluster.view.workers)
                if now != last:
                    emit("registry", workers=now)
                    last = now
                await asyncio.sleep(0.01)

        async def progress() -> None:
            while True:
                emit("progress", done=sum(len(v) for v in outcomes.values()), resubmits=cluster.resubmits)
                await asyncio.sleep(0.25)

        sem = asyncio.Semaphore(cfg["concurrency"])

        async def one(i: int) -> None:
            tid = f"{cfg['prefix']}-{i}"
            async with sem:
                try:
                    o = await cluster.submit(calls=[("sleep_ms", [cfg["task_ms"]]), ("add", [i, 1])], task_id=tid)
                except Exception as exc:  # noqa: BLE001 - reported as this task's outcome
                    outcomes[tid].append({"state": "ERROR", "error": f"{type(exc).__name__}: {exc}",
                                          "done_at": time.time()})
                    return
            outcomes[tid].append({"state": o.state, "outputs": o.outputs, "worker": o.worker,
                                  "attempts": o.attempts, "failure": o.failure_code, "done_at": time.time()})

        bg = [asyncio.ensure_future(registry()), asyncio.ensure_future(progress())]
        t0 = time.time()
        await asyncio.gather(*(one(i) for i in range(cfg["tasks"])))
        t1 = time.time()
        for b in bg:
            b.cancel()

        # Where else did the moved tasks run? Ask each earlier worker for its copy.
        elsewhere: dict[str, dict[str, str]] = defaultdict(dict)
        by_addr: dict[str, list[str]] = defaultdict(list)
        for tid, ps in placements.items():
            final = outcomes[tid][-1].get("worker") if outcomes.get(tid) else None
            for addr in {a for a, _ in ps if a != final}:
                by_addr[addr].append(tid)
        for addr, tids in by_addr.items():
            try:
                async with WorkerClient(addr, connect_timeout_s=5) as wc:
                    for tid in tids:
                        try:
                            elsewhere[tid][addr] = (await wc.result(tid)).state
                        except BlockxError as exc:
                            elsewhere[tid][addr] = f"{type(exc).__name__}"
            except BlockxError as exc:
                for tid in tids:
                    elsewhere[tid][addr] = f"unreachable: {exc}"
        emit("result", started=t0, finished=t1, outcomes=outcomes, placements=placements, elsewhere=elsewhere,
             resubmits=cluster.resubmits, refusals=cluster.refusals, placed=cluster.placed)


if __name__ == "__main__":
    # The client's own warnings (etcd lost, a worker probed and given up) on stderr, with the
    # same wall-clock time as the JSON lines.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(created).3f %(name)s %(message)s")
    asyncio.run(main(json.loads(sys.argv[1])))
