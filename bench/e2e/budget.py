"""(l) The latency budget of one task: where a lone one-call task's time goes.

Sequential one-call tasks (``add(i, 1)``), each awaited before the next, on a fresh
Worker (tracing on, its default), over the unary contract (SubmitTask, then
WatchTasks to the terminal update, as a spec Coordinator drives it) and over one
TaskSession (blockx.client ``submit``), in alternating blocks so a drift of the
shared machine falls on both. Then each task's trace is read through GetTaskTrace
(what `blockx trace` writes) and the median of each of its spans is reported:

- ``task``: accepted -> terminal, the Worker's own span of the task;
- ``activation``: the epoch pin, the code view, the IO scope, up to the Builder;
- ``builder``: the callList builder parsing the one call;
- ``calls``: the Calls phase, of which ``call`` is the call itself (ExecuteCall
  sent -> its CallCompleted read: worker -> executor -> worker);
- ``plugin``: the Plugin phase up to the terminal state (no result handler here).

Beside them, the floors measured in the same run: one round trip over a Unix
socket between two processes doing no work (bench/peers/uds_floor.py: the floor
under ``call``), and grpc.aio on this machine against a WorkerService that does no
work (bench/peers/grpc_floor.py): a unary ping-pong (SubmitTask), the unary
contract (SubmitTask + WatchTasks: the gRPC floor under a unary task) and a bidi
ping-pong over TaskSession (the floor under a session task)."""
from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

import grpc

from bench.e2e import scenarios as sc
from bench.e2e.client import BenchFailure, Client, call_list, task_request
from bench.e2e.harness import ROOT, BenchWorker
from blockx.client import WorkerClient
from blockx.worker.v1 import worker_pb2 as pb

SPANS = ("task", "activation", "builder", "calls", "call", "plugin")
WAYS = ("unary", "session")
BLOCK = 25              # tasks per block; the unary and session blocks alternate


def spans_of(chrome_trace_json: bytes) -> dict[str, int]:
    """The spans of a one-call task's trace (trace_export.py's JSON), in us."""
    out: dict[str, int] = {}
    for ev in json.loads(chrome_trace_json)["traceEvents"]:
        if ev.get("ph") != "X":
            continue
        cat, name = ev.get("cat"), ev["name"]
        if cat == "task":
            out["task"] = ev["dur"]
        elif cat == "phase":
            out[name.split(" ", 1)[0]] = ev["dur"]          # "builder callList" -> builder
        elif cat == "call":
            out["call"] = out.get("call", 0) + ev["dur"]
    missing = [s for s in SPANS if s not in out]
    if missing:
        raise BenchFailure(f"the trace has no {', '.join(missing)} span (events: {sorted(out)})")
    return out


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 1) if values else 0.0


def _p(values: list[float], q: float) -> float:
    return round(sc.percentile(sorted(values), q), 1)


async def _unary_task(client: Client, tid: str, i: int) -> float:
    req = task_request(tid, call_list([("add", [i, 1])]))
    t0 = time.perf_counter()
    await client.stub.SubmitTask(req, timeout=10)
    async for upd in client.stub.WatchTasks(pb.WatchTasksRequest(task_ids=[tid]), timeout=10):
        if upd.is_terminal:
            secs = time.perf_counter() - t0
            r = upd.result
            if r.state != pb.TASK_STATE_SUCCEEDED or list(r.outputs) != [str(i + 1).encode()]:
                raise BenchFailure(f"{tid}: {pb.TaskState.Name(r.state)} {r.failure_code} {r.failure_message}")
            return secs
    raise BenchFailure(f"the watch of {tid} ended without a terminal update")


async def _session_task(session: WorkerClient, tid: str, i: int) -> float:
    t0 = time.perf_counter()
    o = await session.submit([("add", [i, 1])], task_id=tid)
    secs = time.perf_counter() - t0
    if not o.ok or o.outputs != [i + 1]:
        raise BenchFailure(f"{tid}: {o.state} {o.failure_code} {o.failure_message}")
    return secs


async def worker_budget(workers: dict[str, BenchWorker], n: int, timeout: float) -> dict:
    """``n`` sequential tasks each way on each worker, in blocks that alternate
    the ways and rotate the workers; per worker and way the client's latency
    and the medians of the trace spans."""
    clients = {label: Client(w.addr, w.token) for label, w in workers.items()}
    sessions: dict[str, WorkerClient] = {}
    ids = {(label, way): [] for label in workers for way in WAYS}
    client_us: dict[tuple, list[float]] = {key: [] for key in ids}
    deadline = time.monotonic() + timeout
    try:
        for label, w in workers.items():
            sessions[label] = s = WorkerClient(w.addr, token=w.token)
            await s.connect()
            await sc.warm_up(clients[label], ["add"])
            for i in range(20):                        # the session path's lazy parts, too
                await _session_task(s, sc.new_id("lwarm"), i)
        prefix = sc.new_id("l")
        labels = list(workers)
        i = block = 0
        while i < n:
            for label in labels[block % len(labels):] + labels[:block % len(labels)]:
                for way in WAYS:
                    for j in range(i, min(n, i + BLOCK)):
                        tid = f"{prefix}-{label}-{way[0]}-{j}"
                        secs = await (_unary_task(clients[label], tid, j) if way == "unary"
                                      else _session_task(sessions[label], tid, j))
                        ids[label, way].append(tid)
                        client_us[label, way].append(secs * 1e6)
            if time.monotonic() > deadline:
                raise BenchFailure(f"(l) exceeded {timeout}s after {i} tasks each way")
            i += BLOCK
            block += 1
        out: dict = {}
        for (label, way), tids in ids.items():
            spans: dict[str, list[int]] = {s: [] for s in SPANS}
            for tid in tids:
                tr = await clients[label].stub.GetTaskTrace(pb.GetTaskTraceRequest(task_id=tid), timeout=10)
                for s, us in spans_of(tr.chrome_trace_json).items():
                    if s in spans:
                        spans[s].append(us)
            cu = client_us[label, way]
            out.setdefault(label, {})[way] = {
                "client_p50_us": _median(cu), "client_p90_us": _p(cu, 90),
                "span_median_us": {s: _median(v) for s, v in spans.items()},
                "span_p90_us": {s: _p(v, 90) for s, v in spans.items()}}
        return out
    finally:
        for s in sessions.values():
            await s.close()
        for c in clients.values():
            await c.close()


# ---- the floors ------------------------------------------------------------------------


async def uds_floor(round_trips: int, timeout: float) -> dict:
    """bench/peers/uds_floor.py in a process of its own (it forks its peer)."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "bench.peers.uds_floor", "--round-trips",
                                                str(round_trips), cwd=ROOT, stdout=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    if proc.returncode != 0:
        raise BenchFailure(f"bench/peers/uds_floor.py exited {proc.returncode}")
    r = json.loads(out)
    r["round_trip_us"] = round(1e6 / r["round_trips_per_s"], 1)     # one frame in flight: the latency
    return r


async def grpc_floor(n: int, timeout: float) -> dict:
    """Sequential ping-pongs against bench/peers/grpc_floor.py: p50 / p90 in us."""
    proc = subprocess.Popen([sys.executable, "-m", "bench.peers.grpc_floor"], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)
        if not line.strip():
            raise BenchFailure(f"bench/peers/grpc_floor.py exited {proc.wait()} before printing its port")
        client = Client(f"127.0.0.1:{int(line)}")
        try:
            return await asyncio.wait_for(_grpc_pings(client, n), timeout)
        finally:
            await client.close()
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 30)


async def _grpc_pings(client: Client, n: int) -> dict:
    stub = client.stub
    unary: list[float] = []
    contract: list[float] = []
    bidi: list[float] = []
    for i in range(n // 10):                  # warm the channel and both servers' paths
        await stub.SubmitTask(task_request(f"w-{i}", b""), timeout=10)
    for i in range(n):
        req = task_request(f"u-{i}", b"")
        t0 = time.perf_counter()
        await stub.SubmitTask(req, timeout=10)
        unary.append((time.perf_counter() - t0) * 1e6)
    for i in range(n):
        req = task_request(f"c-{i}", b"")
        t0 = time.perf_counter()
        await stub.SubmitTask(req, timeout=10)
        async for upd in stub.WatchTasks(pb.WatchTasksRequest(task_ids=[f"c-{i}"]), timeout=10):
            if upd.is_terminal:
                break
        contract.append((time.perf_counter() - t0) * 1e6)
    call = stub.TaskSession(timeout=60)
    try:
        for i in range(n + n // 10):
            batch = pb.SessionRequestBatch(requests=[pb.SessionRequest(
                request_id=i + 1, submit=pb.SubmitTaskRequest(task=pb.Task(task_id=f"s-{i}")))])
            t0 = time.perf_counter()
            await call.write(batch)
            got = await call.read()
            if got is grpc.aio.EOF or got.events[0].request_id != i + 1:
                raise BenchFailure("the gRPC floor's TaskSession did not answer the ping")
            if i >= n // 10:
                bidi.append((time.perf_counter() - t0) * 1e6)
        await call.done_writing()
    finally:
        call.cancel()
    return {"round_trips": n,
            "unary_p50_us": _median(unary), "unary_p90_us": _p(unary, 90),
            "submit_watch_p50_us": _median(contract), "submit_watch_p90_us": _p(contract, 90),
            "bidi_p50_us": _median(bidi), "bidi_p90_us": _p(bidi, 90)}


# ---- the scenario ------------------------------------------------------------------------


def table(res: dict) -> str:
    """The span table (stderr): medians of each span, unary and session (and the
    baseline's, with --l-baseline), and the floors."""
    f = res["floors"]
    cols = [(label, way) for label in res["workers"] for way in WAYS]
    head = "".join(f" {(way if label == 'worker' else label + ' ' + way):>14}" for label, way in cols)
    rows = [f"(l) one-call task, {res['tasks_each_way']} sequential each way, median us",
            f"  {'span':<12}{head}"]
    for span in SPANS:
        rows.append(f"  {span:<12}" + "".join(f" {res[label][way]['span_median_us'][span]:>14.0f}"
                                             for label, way in cols))
    rows.append(f"  {'client p50':<12}" + "".join(f" {res[label][way]['client_p50_us']:>14.0f}"
                                                 for label, way in cols))
    rows.append(f"  floors: UDS round trip {f['uds_round_trip_us']:.0f}, grpc unary {f['grpc']['unary_p50_us']:.0f}, "
                f"SubmitTask+WatchTasks {f['grpc']['submit_watch_p50_us']:.0f}, bidi {f['grpc']['bidi_p50_us']:.0f}")
    return "\n".join(rows)


async def run_latency_budget(ns, sizes: dict, report: dict) -> None:
    """(l); with --l-baseline DIR also a Worker run from that checkout, side by side."""
    n = sizes["l_tasks"]
    floors: dict = {"uds": await uds_floor(sizes["l_uds_round_trips"], timeout=120),
                    "grpc": await grpc_floor(sizes["l_grpc_round_trips"], timeout=120)}
    workers = {"worker": BenchWorker(executors=ns.executors, auth=ns.auth)}
    baseline = getattr(ns, "l_baseline", None)
    if baseline:
        workers["baseline"] = BenchWorker(executors=ns.executors, auth=ns.auth, root=os.path.abspath(baseline))
    try:
        for w in workers.values():
            await asyncio.to_thread(w.start)
        res = await worker_budget(workers, n, timeout=600)
    except Exception as exc:
        for label, w in workers.items():
            exc.add_note(f"{label} log tail:\n" + w.tail(20))
        raise
    finally:
        for w in workers.values():
            await asyncio.to_thread(w.stop)
            w.cleanup()
    # the floor once more after the workers' part: the machine's drift shows in the pair
    floors["uds_after"] = await uds_floor(sizes["l_uds_round_trips"], timeout=120)
    uds = floors["uds_round_trip_us"] = round(statistics.median(
        [floors["uds"]["round_trip_us"], floors["uds_after"]["round_trip_us"]]), 1)
    res["tasks_each_way"] = n
    res["workers"] = list(workers)
    res["floors"] = floors
    g = floors["grpc"]
    for label in workers:
        r = res[label]
        r["call_over_uds_floor"] = {way: round(r[way]["span_median_us"]["call"] / uds, 2) if uds else None
                                    for way in WAYS}
        r["unary_client_over_floor"] = round(r["unary"]["client_p50_us"] / (g["submit_watch_p50_us"] + uds), 2)
        r["session_client_over_floor"] = round(r["session"]["client_p50_us"] / (g["bidi_p50_us"] + uds), 2)
    report["results"]["l_latency_budget"] = res
    print(table(res), file=sys.stderr, flush=True)
