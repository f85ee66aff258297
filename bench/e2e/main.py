"""`bench/e2e_load.py`: the end-to-end load benchmark against a real Worker.

Starts `python -m blockx serve` (real executors over the Unix socket, etcd off,
everything on 127.0.0.1) and measures through its own grpc.aio client on uvloop:
(a) calls/s of one big callList task, (b) tasks/s of many one-call tasks,
(c) sequential submit -> terminal latency, (d) subcall and IO round trips/s,
(e) worker RSS idle and with many calls queued (on a separate fresh worker),
(f) the fleet: tasks/s through blockx.client.Cluster over three workers in a
real etcd beside one WorkerClient, and the failover time of a SIGKILL under 200
in-flight tasks (bench/e2e/fleet.py).
(s) (a) and (c) side by side in the three executor spawn modes, process,
sandbox (bubblewrap) and sandbox-oci (runc), each on a fresh worker, with the
time to a ready worker and each executor's spawn time (started -> attached):
the sandbox should cost start-up time, not per-call time.
(g) the bundle pipeline into DuckDB and PostgreSQL (a fresh worker and a
throwaway PostgreSQL cluster).
(r) RPC reads/s through the Worker's rpc IO backend against a real ganache
node, beside the same node read directly by one Python client in the same run,
and the cache hit rate of repeated reads (counted from the node's own log).
(l) the latency budget of one task: sequential one-call tasks, unary and over a
session, the median of each of their trace spans (GetTaskTrace) beside the floors
measured in the same run (a Unix-socket round trip, grpc.aio unary and bidi
ping-pongs; bench/e2e/budget.py).

Each scenario group runs on its own: one that fails is recorded in the report's
"errors" (with the worker's log tail), the others still run and are printed,
and the run exits 1. `--quick` runs every scenario at small sizes, as `make
test` does (`make bench-quick`), so a broken scenario fails CI.

--auth token|none runs the workers with that WORKER_AUTH_MODE (default token,
the Worker's default); --auth compare runs (b) and (c), unary and session, on
a token worker and a none worker side by side, alternating which goes first
in each of --auth-rounds rounds, and reports each mode's median and the
difference. --otel compare does the same with OpenTelemetry span export on
(to a real OTLP/gRPC receiver the bench runs) and off, over --otel-rounds.
Prints ONE JSON object with every figure and the sizes used. The figures are
for comparing builds on one machine: these machines are shared and noisy."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time

import uvloop

from bench.e2e import scenarios as sc
from bench.e2e.client import Client
from bench.e2e.harness import BENCH_TOKEN, ROOT, BenchWorker, WorkerError
from bench.e2e.profiling import format_table, top_entries

ALL = ("a", "b", "c", "d", "e", "f", "g", "s", "r", "l")
# (s): the spawn modes and the Worker settings of each (sandbox-oci: a runc container per executor).
SPAWN_MODES = {"process": {"EXECUTOR_SPAWN_MODE": "process"},
               "sandbox": {"EXECUTOR_SPAWN_MODE": "sandbox", "EXECUTOR_SANDBOX_RUNTIME": "bwrap"},
               "sandbox-oci": {"EXECUTOR_SPAWN_MODE": "sandbox", "EXECUTOR_SANDBOX_RUNTIME": "oci"}}

SIZES = {
    "default": {"a": [10_000, 100_000], "b_tasks": 5_000, "b_inflight": 64, "c_tasks": 1_000,
                "d_parents": 100, "d_subcalls": 100, "d_io_parents": 100, "d_io": 100,
                "e_calls": 100_000, "f_tasks": 5_000, "f_task_ms": 500, "s_calls": 10_000, "s_tasks": 500,
                "g_rows": 1_000_000, "g_idle_s": 6.5, "r_parents": 32, "r_reads": 100, "r_repeat": 10,
                "l_tasks": 300, "l_uds_round_trips": 20_000, "l_grpc_round_trips": 1_000},
    "quick": {"a": [2_000, 10_000], "b_tasks": 500, "b_inflight": 64, "c_tasks": 200,
              "d_parents": 20, "d_subcalls": 20, "d_io_parents": 20, "d_io": 20,
              "e_calls": 10_000, "f_tasks": 300, "f_task_ms": 500, "s_calls": 2_000, "s_tasks": 100,
              "g_rows": 50_000, "g_idle_s": 0.0, "r_parents": 16, "r_reads": 25, "r_repeat": 5,
              "l_tasks": 50, "l_uds_round_trips": 2_000, "l_grpc_round_trips": 200},
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/e2e_load.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--executors", type=int, default=2, help="EXECUTOR_COUNT of the measured worker (default 2)")
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run in well under a minute")
    p.add_argument("--only", default=",".join(ALL),
                   help="comma-separated scenarios to run, of a,b,c,d,e,f,g,s,r,l (default: all)")
    p.add_argument("--s-rounds", type=int, default=1,
                   help="(s): rounds of the spawn modes, interleaved; medians over them (default 1)")
    p.add_argument("--fleet-executors", type=int, default=1, help="EXECUTOR_COUNT of each (f) worker (default 1)")
    p.add_argument("--g-rows", type=int, default=0, help="(g): Parquet rows (default: 1,000,000; quick 50,000)")
    p.add_argument("--g-parts", default="rangeScan,dbscan,local,main",
                   help="(g): what to run on the one worker, in order, of rangeScan,dbscan,dbscan_pg,local,main,"
                        "bundle (bundle: bundleWrite into a Parquet file; default: rangeScan,dbscan,local,main; "
                        "one part alone gives a peak RSS from a fresh worker)")
    p.add_argument("--g-duckdb-memory-mb", type=int, default=0,
                   help="(g): dataPlane.duckdbMemoryLimitMb of the worker (default 0: the Worker's default, 128)")
    p.add_argument("--g-warm", type=int, default=0,
                   help="(g): run each writer part first on a bundle of this many rows, so its pre-task RSS "
                        "already holds what any first use loads (default 0: none)")
    p.add_argument("--g-idle-s", type=float, default=None,
                   help="(g): seconds the worker is left idle after the warm-up and after each writer part before "
                        "`rss_idle_bytes` is read: past dataPlane.duckdbIdleCloseMs (5 s by default), when the DuckDB "
                        "sources have handed their buffer pools back (default 6.5, quick 0; 0: not read)")
    p.add_argument("--rss-executors", type=int, default=1, help="EXECUTOR_COUNT of the (e) worker (default 1)")
    p.add_argument("--b-max-outstanding", type=int, default=192,
                   help="(b): tasks submitted and not yet terminal, below TASK_SLOTS=256 (default 192)")
    p.add_argument("--b-watch-batch", type=int, default=128,
                   help="(b): most ids per WatchTasks stream (default 128)")
    p.add_argument("--b-watch-delay-ms", type=float, default=20.0,
                   help="(b): longest wait for a WatchTasks batch to fill (default 20 ms)")
    p.add_argument("--cprofile", metavar="PREFIX",
                   help="run each worker under cProfile, writing PREFIX-main.prof / PREFIX-rss.prof; "
                        "the top entries go to stderr and into the JSON")
    p.add_argument("--profile-top", type=int, default=25, help="entries per profile table (default 25)")
    p.add_argument("--auth", choices=("token", "none", "compare"), default="token",
                   help="WORKER_AUTH_MODE of the workers (default token); compare: (b) and (c) on a token and "
                        "a none worker side by side, in alternating rounds")
    p.add_argument("--auth-rounds", type=int, default=3, help="rounds of --auth compare (default 3)")
    p.add_argument("--otel", choices=("off", "compare"), default="off",
                   help="compare: (b) and (c) on a worker exporting OpenTelemetry spans over OTLP/gRPC and "
                        "one not exporting, side by side, in alternating rounds (default off: no export)")
    p.add_argument("--otel-rounds", type=int, default=3, help="rounds of --otel compare (default 3)")
    p.add_argument("--otel-sampler", default="always_on",
                   help="OTEL_TRACES_SAMPLER of the exporting worker (default always_on; always_off keeps the "
                        "worker's recording and the pipe and drops every task in the exporter process, which "
                        "isolates the worker's own cost)")
    p.add_argument("--l-baseline", metavar="DIR",
                   help="(l): also run a Worker from the checkout DIR (its extensions and generated code built, "
                        "e.g. a `git worktree` of main), side by side in alternating blocks: a before/after")
    p.add_argument("--timeout", type=float, default=600.0, help="bound of the whole run in seconds")
    ns = p.parse_args(argv)
    ns.only = [s.strip() for s in ns.only.split(",") if s.strip()]
    bad = [s for s in ns.only if s not in ALL]
    if bad or not ns.only:
        p.error(f"--only takes a comma-separated subset of {','.join(ALL)}; got {bad or 'nothing'}")
    if ns.executors < 1 or ns.rss_executors < 1:
        p.error("--executors and --rss-executors must be at least 1")
    if ns.auth == "compare" and (set(ns.only) - {"b", "c"} or ns.auth_rounds < 1):
        p.error("--auth compare measures (b) and (c) only: use --only b,c (or one of them) and --auth-rounds >= 1")
    if ns.otel == "compare" and (set(ns.only) - {"b", "c"} or ns.otel_rounds < 1 or ns.auth == "compare"):
        p.error("--otel compare measures (b) and (c) only: use --only b,c (or one of them), --otel-rounds >= 1, "
                "and --auth token or none")
    if not 0 < ns.b_max_outstanding <= 256:
        p.error("--b-max-outstanding must be within 1..256 (the worker has 256 task slots)")
    return ns


def compiled_extensions() -> dict:
    """Which hot-path implementation the worker (same environment) loads."""
    from blockx import _fast
    out = {}
    for name in ("codec", "outbox", "readyqueue", "scoring", "cachekey"):
        try:
            mod = _fast.load(name)
            out[name] = "cython" if mod.__file__.endswith((".so", ".pyd")) else "python"
        except ImportError:
            out[name] = "missing"
    return {"used": all(v == "cython" for v in out.values()), "modules": out,
            "BLOCKX_NO_EXTENSIONS": os.environ.get("BLOCKX_NO_EXTENSIONS", "")}


async def run_main_worker(ns, sizes: dict, report: dict) -> None:
    prof = f"{ns.cprofile}-main.prof" if ns.cprofile else None
    w = BenchWorker(executors=ns.executors, cprofile_out=prof, auth=ns.auth)
    t0 = time.perf_counter()
    await _start(w)
    report["worker"] = {"executors": ns.executors, "start_s": round(time.perf_counter() - t0, 3), "pid": w.pid}
    client = Client(w.addr, w.token)
    try:
        await sc.warm_up(client, ["add1", "add", "subcall_loop", "io_loop"])
        res = report["results"]
        if "a" in ns.only:
            res["a_call_throughput"] = [await _with_cpu(w, sc.call_throughput(client, n, timeout=300))
                                        for n in sizes["a"]]
        if "b" in ns.only:
            res["b_task_throughput"] = await _with_cpu(w, sc.task_throughput(
                client, sizes["b_tasks"], sizes["b_inflight"], ns.b_max_outstanding, ns.b_watch_batch,
                ns.b_watch_delay_ms, timeout=300))
            res["b_session_task_throughput"] = await _with_cpu(w, sc.session_task_throughput(
                w.addr, sizes["b_tasks"], sizes["b_inflight"], timeout=300, token=w.token))
        if "c" in ns.only:
            res["c_latency"] = await _with_cpu(w, sc.latency(client, sizes["c_tasks"], timeout=300))
            res["c_session_latency"] = await _with_cpu(w, sc.session_latency(w.addr, sizes["c_tasks"],
                                                                             timeout=300, token=w.token))
        if "d" in ns.only:
            res["d_subcalls"] = await _with_cpu(w, sc.subcall_rate(client, sizes["d_parents"], sizes["d_subcalls"],
                                                                   timeout=300))
            res["d_io"] = await _with_cpu(w, sc.io_rate(client, sizes["d_io_parents"], sizes["d_io"], timeout=300))
        report["worker"]["rss_end_bytes"] = w.rss_bytes()
    except Exception as exc:
        exc.add_note("worker log tail:\n" + w.tail(20))
        raise
    finally:
        await client.close()
        rc = await asyncio.to_thread(w.stop)
        report["worker"]["exit_code"] = rc
        if prof:
            _add_profile(ns, report, "main", prof)
        w.cleanup()


async def _bc_figures(ns, sizes: dict, w: BenchWorker, client: Client) -> dict:
    """(b) and (c), unary and session, on one worker: the headline figure of each, and
    the worker process's CPU time per task (less sensitive than wall time to what
    else the shared machine runs)."""
    out = {}

    async def cpu_per_task(label: str, n: int, coro) -> dict:
        c0 = w.cpu_seconds()
        r = await coro
        c1 = w.cpu_seconds()
        out[f"{label}_worker_cpu_us_per_task"] = round(1e6 * (c1["worker"] - c0["worker"]) / n, 1)
        if c1["exporter"]:          # OpenTelemetry export on: what its own process spent
            out[f"{label}_exporter_cpu_us_per_task"] = round(1e6 * (c1["exporter"] - c0["exporter"]) / n, 1)
        return r
    if "b" in ns.only:
        n = sizes["b_tasks"]
        r = await cpu_per_task("b", n, sc.task_throughput(client, n, sizes["b_inflight"], ns.b_max_outstanding,
                                                          ns.b_watch_batch, ns.b_watch_delay_ms, timeout=300))
        out["b_tasks_per_s"] = r["tasks_per_s"]
        r = await cpu_per_task("b_session", n, sc.session_task_throughput(w.addr, n, sizes["b_inflight"],
                                                                          timeout=300, token=w.token))
        out["b_session_tasks_per_s"] = r["tasks_per_s"]
    if "c" in ns.only:
        n = sizes["c_tasks"]
        r = await cpu_per_task("c", n, sc.latency(client, n, timeout=300))
        out["c_p50_ms"], out["c_mean_ms"] = r["p50_ms"], r["mean_ms"]
        r = await cpu_per_task("c_session", n, sc.session_latency(w.addr, n, timeout=300, token=w.token))
        out["c_session_p50_ms"], out["c_session_mean_ms"] = r["p50_ms"], r["mean_ms"]
    return out


async def run_auth_compare(ns, sizes: dict, report: dict) -> None:
    """(b) and (c) with WORKER_AUTH_MODE=token and =none, side by side (_side_by_side);
    `token_cost_percent` is token relative to none (positive: token is slower)."""
    workers = {mode: BenchWorker(executors=ns.executors, auth=mode) for mode in ("token", "none")}
    rounds, median, cost = await _side_by_side(ns, sizes, workers, ns.auth_rounds, "auth_round")
    report["results"]["auth_compare"] = {"rounds": rounds, "median": median, "token_cost_percent": cost}


async def run_otel_compare(ns, sizes: dict, report: dict) -> None:
    """(b) and (c) with OpenTelemetry export on (OTEL_EXPORTER_OTLP_ENDPOINT at a real
    OTLP/gRPC receiver in a process of its own, OTEL_TRACES_SAMPLER --otel-sampler,
    call spans at their default rate) and off, side by side (_side_by_side); `on_cost_percent`
    is on relative to off (positive: export costs). `spans_received` proves the
    export ran."""
    receiver = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.otlp_receiver", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, cwd=str(ROOT))
    try:
        port = int(await asyncio.wait_for(receiver.stdout.readline(), 30))
        on_env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_TRACES_SAMPLER": ns.otel_sampler}
        workers = {"on": BenchWorker(executors=ns.executors, auth=ns.auth, env=on_env),
                   "off": BenchWorker(executors=ns.executors, auth=ns.auth)}
        rounds, median, cost = await _side_by_side(ns, sizes, workers, ns.otel_rounds, "otel_round")
        receiver.stdin.write(b"count\n")
        await receiver.stdin.drain()
        received = int(await asyncio.wait_for(receiver.stdout.readline(), 30))
    finally:
        if receiver.returncode is None:
            receiver.stdin.close()
            try:
                await asyncio.wait_for(receiver.wait(), 10)
            except asyncio.TimeoutError:
                receiver.kill()
    report["results"]["otel_compare"] = {"rounds": rounds, "median": median, "on_cost_percent": cost,
                                         "spans_received": received}


async def _side_by_side(ns, sizes: dict, workers: dict[str, BenchWorker], n_rounds: int, tag: str):
    """(b) and (c) on two workers (first: the one measured, second: the baseline), each
    warmed up, then ``n_rounds`` rounds that alternate which one runs first. Returns
    the rounds, each worker's median over them, and the measured one's cost in
    percent of the baseline per figure (positive: it is slower)."""
    import statistics

    clients: dict[str, Client] = {}
    rounds: list[dict] = []
    label, base = list(workers)
    try:
        for mode, w in workers.items():
            await _start(w)
            clients[mode] = Client(w.addr, w.token)
            await sc.warm_up(clients[mode], ["add1"])
        for r in range(n_rounds):
            order = (label, base) if r % 2 == 0 else (base, label)
            row = {"order": list(order)}
            for mode in order:
                row[mode] = await _bc_figures(ns, sizes, workers[mode], clients[mode])
            rounds.append(row)
            print(json.dumps({tag: r, **row}), file=sys.stderr, flush=True)
    except Exception as exc:
        for mode, w in workers.items():
            exc.add_note(f"{mode} worker log tail:\n" + w.tail(20))
        raise
    finally:
        for c in clients.values():
            await c.close()
        for w in workers.values():
            await asyncio.to_thread(w.stop)
            w.cleanup()
    median = {mode: {k: round(statistics.median(row[mode][k] for row in rounds), 3) for k in rounds[0][mode]}
              for mode in workers}
    higher_is_better = {"b_tasks_per_s", "b_session_tasks_per_s"}
    cost = {}
    for k, base_v in median[base].items():
        v = median[label][k]
        cost[k] = round(100 * ((base_v - v) / base_v if k in higher_is_better else (v - base_v) / base_v), 2)
    return rounds, median, cost


async def _start(w: BenchWorker) -> None:
    """Start, or leave nothing behind: a worker that failed to come up is stopped."""
    try:
        await asyncio.to_thread(w.start)
    except BaseException:
        try:
            await asyncio.to_thread(w.stop, 10)
        except WorkerError:
            pass
        w.cleanup()
        raise


async def _with_cpu(w: BenchWorker, coro) -> dict:
    """The scenario's figures plus the CPU seconds the worker, its executors and
    this client spent meanwhile: on 2 shared cores they tell which side was busy."""
    c0, p0, t0 = w.cpu_seconds(), time.process_time(), time.perf_counter()
    out = await coro
    c1, p1, t1 = w.cpu_seconds(), time.process_time(), time.perf_counter()
    out["cpu_s"] = {"wall": round(t1 - t0, 3), "worker": round(c1["worker"] - c0["worker"], 2),
                    "executors": round(c1["executors"] - c0["executors"], 2), "client": round(p1 - p0, 2)}
    return out


async def run_rss_worker(ns, sizes: dict, report: dict) -> None:
    prof = f"{ns.cprofile}-rss.prof" if ns.cprofile else None
    # Calls sleep far longer than the task lives: they stay queued until the
    # task times out. The timeout leaves time to build and measure.
    n = sizes["e_calls"]
    task_timeout_ms = 20_000 if n >= 50_000 else 8_000
    w = BenchWorker(executors=ns.rss_executors, cprofile_out=prof)
    await _start(w)
    client = Client(w.addr, w.token)
    try:
        await sc.warm_up(client, ["add1", "sleep_ms"], copies=500)
        report["results"]["e_rss"] = await sc.rss_queued(client, w, n, sleep_ms=600_000,
                                                         task_timeout_ms=task_timeout_ms,
                                                         timeout=task_timeout_ms / 1000 + 60)
    except Exception as exc:
        exc.add_note("worker log tail:\n" + w.tail(20))
        raise
    finally:
        await client.close()
        await asyncio.to_thread(w.stop)
        if prof:
            _add_profile(ns, report, "rss", prof)
        w.cleanup()


def executor_spawn_ms(events: list[dict]) -> list[float]:
    """Per executor start: ms from the pool's "executor exec-N started" to the
    adapter's "executor exec-N attached" (the executor's start, its sandbox's
    and its first Heartbeat), from the worker's JSON log."""
    from datetime import datetime

    started: dict[str, float] = {}
    out = []
    for ev in events:
        msg, ts = ev.get("msg", ""), ev.get("ts")
        if not ts or not msg.startswith("executor exec-"):
            continue
        eid = msg.split()[1]
        at = datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000
        if " started (pid " in msg:
            started[eid] = at
        elif " attached (pid " in msg and eid in started:
            out.append(round(at - started.pop(eid), 1))
    return out


async def run_spawn_modes(ns, sizes: dict, report: dict) -> None:
    """(s): one fresh worker per spawn mode and round, (a) and (c) on each, side
    by side; --s-rounds rounds, interleaved (each round starts with the next
    mode), and the median of each figure over the rounds."""
    out = report["results"]["s_spawn_modes"] = {}
    modes = list(SPAWN_MODES)
    rounds: dict[str, list[dict]] = {m: [] for m in modes}
    for n in range(ns.s_rounds):
        for mode in modes[n % len(modes):] + modes[:n % len(modes)]:
            w = BenchWorker(executors=ns.executors, env=SPAWN_MODES[mode])
            t0 = time.perf_counter()
            await _start(w)
            row = {"ready_s": round(time.perf_counter() - t0, 3)}
            client = Client(w.addr, w.token)
            try:
                await asyncio.to_thread(w.wait_executors, 60)
                row["executor_spawn_ms"] = executor_spawn_ms(w.events())
                await sc.warm_up(client, ["add1", "add"])
                row["a_call_throughput"] = await _with_cpu(w, sc.call_throughput(client, sizes["s_calls"],
                                                                                 timeout=300))
                row["c_latency"] = await _with_cpu(w, sc.latency(client, sizes["s_tasks"], timeout=300))
            except Exception as exc:
                exc.add_note(f"{mode} worker log tail:\n" + w.tail(20))
                raise
            finally:
                await client.close()
                await asyncio.to_thread(w.stop)
                w.cleanup()
            rounds[mode].append(row)
    for mode, rows in rounds.items():
        spawn = [ms for r in rows for ms in r["executor_spawn_ms"]]
        out[mode] = {
            "rounds": rows,
            "median_executor_spawn_ms": round(statistics.median(spawn), 1) if spawn else None,
            "median_ready_s": round(statistics.median(r["ready_s"] for r in rows), 3),
            "median_a_calls_per_s": statistics.median(r["a_call_throughput"]["calls_per_s"] for r in rows),
            "median_c_p50_ms": statistics.median(r["c_latency"]["p50_ms"] for r in rows),
            "median_c_p99_ms": statistics.median(r["c_latency"]["p99_ms"] for r in rows),
        }


async def run_bundle_worker(ns, sizes: dict, report: dict) -> None:
    """(g) on a fresh worker whose sources are a local DuckDB file and a throwaway
    PostgreSQL cluster (skipped, and said so, where PostgreSQL is not installed)."""
    import tempfile

    import duckdb

    from tests.support.postgres import PostgresServer, pg_bin_dir

    rows = ns.g_rows or sizes["g_rows"]
    base = tempfile.mkdtemp(prefix="blockx-bench-bundle-")
    (root := os.path.join(base, "bundles", "data")) and os.makedirs(root)
    con = duckdb.connect()
    half = rows // 2
    for n, (lo, hi) in enumerate(((0, half), (half, rows))):
        con.execute(f"COPY (SELECT i AS id, i % 1000 AS x FROM range({lo}, {hi}) t(i)) "
                    f"TO '{root}/part-{n}.parquet' (FORMAT PARQUET)")
    if ns.g_warm:
        os.makedirs(warm := os.path.join(base, "bundles", "warm"))
        con.execute(f"COPY (SELECT i AS id, i % 1000 AS x FROM range({ns.g_warm}) t(i)) "
                    f"TO '{warm}/part-0.parquet' (FORMAT PARQUET)")
    con.close()
    pg = PostgresServer().start() if pg_bin_dir() else None
    sources = {"local": f"duckdb://{base}/state/local.duckdb"}
    if pg is not None:
        sources["main"] = pg.dsn
    # dev = block + the dev stubs: rangeScan is the scan-memory reference.
    w = BenchWorker(executors=ns.executors, profile="dev", env={
        "STREAM_BUILD_ENABLED": "true", "BUNDLE_ROOT": os.path.join(base, "bundles"),
        "STATE_DIR": os.path.join(base, "state"), "BLOCKX_DATA_SOURCES": json.dumps(sources),
        "PHASE_IO_TIMEOUT_MS": "600000", **_duckdb_limit_config(base, ns.g_duckdb_memory_mb)})
    client = None
    try:
        await _start(w)
        client = Client(w.addr, w.token)
        await sc.warm_up(client, ["add1"])
        parts = [p.strip() for p in ns.g_parts.split(",")]
        targets = [t for t in ("local", "main", "bundle") if t in parts and (t != "main" or pg is not None)]
        res = await _with_cpu(w, sc.bundle_pipeline(client, w, "data/*.parquet", rows, targets, timeout=3600,
                                                    scans=tuple(p for p in parts if "scan" in p.lower()),
                                                    warm=("warm/*.parquet", ns.g_warm) if ns.g_warm else None,
                                                    idle_s=sizes["g_idle_s"] if ns.g_idle_s is None
                                                    else ns.g_idle_s))
        res["targets"] = {"local": "duckdb", "main": "postgresql" if pg is not None else "not installed",
                          "bundle": "bundleWrite (Parquet)"}
        report["results"]["g_bundle_pipeline"] = res
    except Exception as exc:
        exc.add_note("worker log tail:\n" + w.tail(20))
        raise
    finally:
        if client is not None:
            await client.close()
        await asyncio.to_thread(w.stop)
        w.cleanup()
        if pg is not None:
            await asyncio.to_thread(pg.close)
        import shutil
        shutil.rmtree(base, ignore_errors=True)


def _duckdb_limit_config(base: str, limit_mb: int) -> dict[str, str]:
    """WORKER_CONFIG setting dataPlane.duckdbMemoryLimitMb, when asked (--g-duckdb-memory-mb)."""
    if not limit_mb:
        return {}
    path = os.path.join(base, "worker-config.json")
    with open(path, "w") as f:
        json.dump({"dataPlane": {"duckdbMemoryLimitMb": limit_mb}}, f)
    return {"WORKER_CONFIG": path}


async def run_rpc_worker(ns, sizes: dict, report: dict) -> None:
    """(r) on a fresh worker whose rpc endpoint `node` is a throwaway ganache.
    Direct first, then through the Worker without and with repeats: one node,
    one run. The hit rate counts the eth_getBalance lines the node logged."""
    from tests.support.ganache import GanacheNode

    node = GanacheNode(log_methods=True)
    await asyncio.to_thread(node.start)
    p, n, k = sizes["r_parents"], sizes["r_reads"], sizes["r_repeat"]
    w = BenchWorker(executors=ns.executors, env={
        "RPC_ENDPOINTS": json.dumps({"node": {"urls": [node.url], "concurrency": 16}})})
    client = None
    out = report["results"]["r_rpc"] = {"node": "ganache " + node.url}
    try:
        await _start(w)
        client = Client(w.addr, w.token)
        await sc.warm_up(client, ["add1"])
        await sc.rpc_direct(node.url, 4, 10, timeout=120)            # warm the node
        await sc.rpc_reads(client, 4, 10, 1, timeout=120)
        out["direct_one_client"] = await sc.rpc_direct(node.url, p, n, timeout=300)
        out["worker_uncached"] = await _with_cpu(w, sc.rpc_reads(client, p, n, 1, timeout=300))
        before = node.methods_served("eth_getBalance")
        cached = out["worker_repeat"] = await _with_cpu(w, sc.rpc_reads(client, p, n, k, timeout=300))
        reached = node.methods_served("eth_getBalance") - before
        cached["node_requests"] = reached
        cached["cache_hit_rate"] = round(1 - reached / cached["reads"], 4)
        await client.close()
        client = None
        await asyncio.to_thread(w.stop)
        w.cleanup()
        # the same uncached reads with batching off (maxBatch 1): what the batches are worth
        conf = os.path.join(node.base, "nobatch.json")
        with open(conf, "w") as f:
            json.dump({"ioBackends": {"rpc": {"maxBatch": 1}}}, f)
        w = BenchWorker(executors=ns.executors, env={
            "WORKER_CONFIG": conf, "RPC_ENDPOINTS": json.dumps({"node": {"urls": [node.url], "concurrency": 16}})})
        await _start(w)
        client = Client(w.addr, w.token)
        await sc.warm_up(client, ["add1"])
        await sc.rpc_reads(client, 4, 10, 1, timeout=120)
        out["worker_uncached_max_batch_1"] = await _with_cpu(w, sc.rpc_reads(client, p, n, 1, timeout=300))
        # direct once more, last: the node warms up (V8 JIT) over the run, so order matters
        out["direct_one_client_last"] = await sc.rpc_direct(node.url, p, n, timeout=300)
        direct = max(out["direct_one_client"]["reads_per_s"], out["direct_one_client_last"]["reads_per_s"])
        out["worker_vs_best_direct"] = {k: round(out[k]["reads_per_s"] / direct, 3)
                                        for k in ("worker_uncached", "worker_uncached_max_batch_1", "worker_repeat")}
    except Exception as exc:
        exc.add_note("worker log tail:\n" + w.tail(20))
        raise
    finally:
        if client is not None:
            await client.close()
        await asyncio.to_thread(w.stop)
        w.cleanup()
        await asyncio.to_thread(node.close)


def _add_profile(ns, report: dict, label: str, path: str) -> None:
    if not os.path.exists(path):
        report.setdefault("profiles", {})[label] = {"file": path, "error": "not written"}
        return
    summary = top_entries(path, ns.profile_top)
    report.setdefault("profiles", {})[label] = summary
    print(format_table(summary), file=sys.stderr)


# The scenario groups in the order they run: (the scenarios of the group, its runner).
# A group runs when --only names any of its scenarios; one that raises is recorded in
# the report's "errors" and the next group still runs (its figures are printed), but
# the run exits 1: a broken scenario fails `make bench`, it is never just missing.
async def _fleet(ns, sizes: dict, report: dict) -> None:
    from bench.e2e.fleet import run_fleet
    await run_fleet(ns, sizes, report)


async def _latency_budget(ns, sizes: dict, report: dict) -> None:
    from bench.e2e.budget import run_latency_budget
    await run_latency_budget(ns, sizes, report)


GROUPS = (("abcd", run_main_worker), ("e", run_rss_worker), ("f", _fleet), ("s", run_spawn_modes),
          ("g", run_bundle_worker), ("r", run_rpc_worker), ("l", _latency_budget))


def _error_entry(scenarios: str, exc: BaseException, timeout: float) -> dict:
    msg = (f"the run exceeded --timeout {timeout:g} s" if isinstance(exc, asyncio.TimeoutError)
           else f"{type(exc).__name__}: {exc}")
    return {"scenarios": scenarios, "error": msg, "notes": list(getattr(exc, "__notes__", []))}


async def run_groups(ns, sizes: dict, report: dict, groups=GROUPS) -> None:
    """Every group --only asks for, each on its own: an error is recorded
    (report["errors"]) and the rest still run."""
    errors = report.setdefault("errors", [])
    for letters, runner in groups:
        picked = "".join(s for s in letters if s in ns.only)
        if not picked:
            continue
        t0 = time.perf_counter()
        try:
            await runner(ns, sizes, report)
        except Exception as exc:  # noqa: BLE001 - recorded, and the run fails at its end
            errors.append(_error_entry(",".join(picked), exc, ns.timeout))
            print(f"scenario {','.join(picked)} failed: {errors[-1]['error']}", file=sys.stderr, flush=True)
        report.setdefault("group_elapsed_s", {})[",".join(picked)] = round(time.perf_counter() - t0, 2)


async def run(ns, groups=GROUPS) -> dict:
    sizes = SIZES["quick" if ns.quick else "default"]
    report: dict = {
        "benchmark": "blockx e2e load",
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "compiled_extensions": compiled_extensions(),
        "mode": "quick" if ns.quick else "default",
        "scenarios": ns.only,
        "sizes": {**sizes, "b_max_outstanding": ns.b_max_outstanding, "b_watch_batch": ns.b_watch_batch,
                  "b_watch_delay_ms": ns.b_watch_delay_ms,
                  "rss_executors": ns.rss_executors},
        "results": {},
        "errors": [],
    }
    t0 = time.perf_counter()
    report["auth"] = ns.auth
    report["otel"] = ns.otel
    try:
        if ns.auth == "compare":
            await run_auth_compare(ns, sizes, report)
        elif ns.otel == "compare":
            await run_otel_compare(ns, sizes, report)
        else:
            await run_groups(ns, sizes, report, groups)
    except Exception as exc:  # noqa: BLE001 - a compare run is one group
        report["errors"].append(_error_entry(",".join(ns.only), exc, ns.timeout))
    report["elapsed_s"] = round(time.perf_counter() - t0, 2)
    return report


def main(argv=None, groups=GROUPS) -> int:
    """Prints the one JSON object (every figure, and "errors"); 0 when every scenario
    ran, 1 when any failed or the run as a whole did (--timeout)."""
    ns = parse_args(argv)
    # Every blockx.client the bench opens (sessions, the fleet's Cluster) sends the token
    # the bench's token-mode workers accept.
    # The caller's own token comes back after the run (a test calls main in-process).
    caller_token = os.environ.get("BLOCKX_TOKEN")
    os.environ["BLOCKX_TOKEN"] = BENCH_TOKEN
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            report = runner.run(asyncio.wait_for(run(ns, groups), ns.timeout))
    except Exception as exc:  # noqa: BLE001 - any failure is reported as the one JSON object
        print(json.dumps({"errors": [_error_entry(",".join(ns.only), exc, ns.timeout)]}))
        return 1
    finally:
        if caller_token is None:
            os.environ.pop("BLOCKX_TOKEN", None)
        else:
            os.environ["BLOCKX_TOKEN"] = caller_token
    print(json.dumps(report))
    if report["errors"]:
        print(f"{len(report['errors'])} scenario group(s) failed: "
              + "; ".join(f"({e['scenarios']}) {e['error']}" for e in report["errors"]), file=sys.stderr)
        return 1
    return 0
