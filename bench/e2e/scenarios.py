"""The load scenarios (docs/performance.md). Each returns a dict of figures.

(a) call throughput: one callList task of N trivial calls, submit -> terminal.
(b) task throughput: many one-call tasks, a fixed number of SubmitTask RPCs in
    flight; each id is watched right after its SubmitTask returns, on a WatchTasks
    stream shared by a batch of ids (a task that finished before its stream opened
    is still reported: the stream starts with the current state).
(c) latency: sequential one-call tasks, SubmitTask -> terminal TaskUpdate.
(b) and (c) over one TaskSession too (``session_*``), through blockx.client as a
    Coordinator would use it: ``map`` with 64 tasks in flight, and sequential
    ``submit`` (follow) -> terminal update.
(d) subcall and IO round trips: parents that each make K sequential subcalls or
    K sequential devstub IO requests (distinct args and requests: the task's call
    and IO caches never answer).
(g) the bundle pipeline: N Parquet rows -> bundleScan -> trivial function ->
    tableUpserts into DuckDB and into PostgreSQL (a throwaway cluster), and (part
    "bundle") bundleWrite into one Parquet file, rows/s and the worker's RSS before,
    at its peak and after; then dbscan against rangeScan for the scan's own memory.
(e) worker RSS idle and with N calls queued in the dispatcher: a fresh worker
    with few executors gets one N-call task of long sleeps; the executors hold
    their in-flight cap and the rest of the calls wait in the ready queue. The
    task times out afterwards (the only way a client can end it early).
"""
from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import time

import grpc

from blockx.client import WorkerClient
from blockx.credentials import TOKEN_FROM_ENV

from bench.e2e.client import BenchFailure, Client, call_list, expect_ok, outputs, task_request, wait_until
from blockx.worker.v1 import worker_pb2 as pb

_ids = itertools.count()


def new_id(prefix: str) -> str:
    return f"bench-{prefix}-{next(_ids)}"


def _rate(n: int, seconds: float) -> float:
    return round(n / seconds, 1) if seconds > 0 else 0.0


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, int(round(p / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


WARM_ARGS = {
    "add1": lambda i: [i], "add": lambda i: [i, 1], "sleep_ms": lambda i: [i % 2],
    "subcall_loop": lambda i: [2, -1 - i], "io_loop": lambda i: [2, -1 - i],
}


async def warm_up(client: Client, functions: list[str], copies: int = 200) -> None:
    """Executors fetch and compile each function's code on first use, and the
    worker's lazy paths run once: keep that out of every measured figure. Args
    differ per copy: identical calls would join one singleflight and warm only
    one executor."""
    calls = [(f, WARM_ARGS[f](i)) for f in functions for i in range(copies)]
    tid = new_id("warm")
    res, _ = await client.run_task(tid, call_list(calls), 60)
    expect_ok(tid, res, len(calls))


# ---- (a) ---------------------------------------------------------------------------


async def call_throughput(client: Client, n: int, timeout: float) -> dict:
    tid = new_id(f"a{n}")
    payload = call_list(("add1", [i]) for i in range(n))
    res, secs = await client.run_task(tid, payload, timeout)
    expect_ok(tid, res, n)
    got = outputs(await client.complete(tid, res) if res.outputs_truncated else res)
    if got[0] != 1 or got[-1] != n or sum(got) != n * (n + 1) // 2:
        raise BenchFailure(f"task {tid}: wrong outputs")
    st = res.statistic
    return {"calls": n, "seconds": round(secs, 4), "calls_per_s": _rate(n, secs),
            "worker_builder_ms": st.builder_ms, "worker_calls_ms": st.calls_ms,
            "worker_calls_per_s": _rate(n, st.calls_ms / 1000.0) if st.calls_ms else None}


# ---- (b) ---------------------------------------------------------------------------


async def task_throughput(client: Client, n: int, inflight: int, max_outstanding: int,
                          watch_batch: int, watch_delay_ms: float, timeout: float) -> dict:
    """`inflight` SubmitTask RPCs at once; at most `max_outstanding` tasks submitted
    and not yet terminal (they hold task slots); ids go to a WatchTasks stream per
    batch of up to `watch_batch` ids, opened when the batch fills or
    `watch_delay_ms` after its first id (every stream costs the worker about one
    RPC, and every id on it one or two messages)."""
    loop = asyncio.get_running_loop()
    prefix = new_id("b")
    outstanding = asyncio.Semaphore(max_outstanding)
    next_index = iter(range(n))
    batch: list[str] = []
    flush_scheduled = False
    streams: set[asyncio.Task] = set()
    failures: list[str] = []
    done = 0
    all_done = loop.create_future()
    retries = 0
    streams_opened = 0

    async def watch(ids: list[str]) -> None:
        nonlocal done
        call = client.stub.WatchTasks(pb.WatchTasksRequest(task_ids=ids), timeout=timeout)
        async for upd in call:
            if not upd.is_terminal:
                continue
            outstanding.release()
            i = int(upd.task_id.rsplit("-", 1)[1])
            r = upd.result
            if r.state != pb.TASK_STATE_SUCCEEDED or list(r.outputs) != [str(i + 1).encode()]:
                failures.append(f"{upd.task_id}: {pb.TaskState.Name(r.state)} {r.failure_code} "
                                f"{r.failure_message} {list(r.outputs)}")
            done += 1
            if done == n and not all_done.done():
                all_done.set_result(time.perf_counter())

    def flush() -> None:
        # Runs from the timer or when a batch fills; a timer that fires after a
        # full batch was flushed finds a younger batch and sends it a bit early.
        nonlocal flush_scheduled, streams_opened
        flush_scheduled = False
        if not batch:
            return
        ids = batch[:]
        batch.clear()
        streams_opened += 1
        t = loop.create_task(watch(ids))
        streams.add(t)
        t.add_done_callback(_stream_done)

    def _stream_done(t: asyncio.Task) -> None:
        streams.discard(t)
        if not t.cancelled() and t.exception() is not None and not all_done.done():
            all_done.set_exception(t.exception())

    def watch_soon(tid: str) -> None:
        nonlocal flush_scheduled
        batch.append(tid)
        if len(batch) >= watch_batch:
            flush()
        elif not flush_scheduled:
            flush_scheduled = True
            loop.call_later(watch_delay_ms / 1000.0, flush)

    async def submitter() -> None:
        nonlocal retries
        for i in next_index:
            tid = f"{prefix}-{i}"
            req = task_request(tid, call_list([("add1", [i])]))
            await outstanding.acquire()
            while True:
                try:
                    await client.stub.SubmitTask(req, timeout=30)
                    break
                except grpc.aio.AioRpcError as exc:
                    # A slot freed by a terminal update may not be free yet in
                    # the core's books for an instant: back off and retry.
                    if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                        raise
                    retries += 1
                    await asyncio.sleep(0.001)
            watch_soon(tid)

    t0 = time.perf_counter()
    subs = [loop.create_task(submitter()) for _ in range(inflight)]
    try:
        await asyncio.wait_for(asyncio.gather(*subs), timeout)
        t_submitted = time.perf_counter()
        t_end = await asyncio.wait_for(all_done, timeout)
    finally:
        for t in subs + list(streams):
            t.cancel()
    if failures:
        raise BenchFailure(f"{len(failures)} of {n} tasks failed, e.g. {failures[0]}")
    secs = t_end - t0
    return {"tasks": n, "submit_inflight": inflight, "max_outstanding": max_outstanding,
            "watch_batch": watch_batch, "watch_delay_ms": watch_delay_ms,
            "seconds": round(secs, 4), "tasks_per_s": _rate(n, secs),
            "submit_phase_tasks_per_s": _rate(n, t_submitted - t0),
            "watch_streams": streams_opened, "no_slot_retries": retries}


# ---- (c) ---------------------------------------------------------------------------


async def latency(client: Client, n: int, timeout: float) -> dict:
    total: list[float] = []
    submit: list[float] = []
    prefix = new_id("c")
    deadline = time.monotonic() + timeout
    for i in range(n):
        tid = f"{prefix}-{i}"
        req = task_request(tid, call_list([("add1", [i])]))
        t0 = time.perf_counter()
        await client.stub.SubmitTask(req, timeout=10)
        t1 = time.perf_counter()
        async for upd in client.stub.WatchTasks(pb.WatchTasksRequest(task_ids=[tid]), timeout=10):
            if upd.is_terminal:
                t2 = time.perf_counter()
                if upd.result.state != pb.TASK_STATE_SUCCEEDED:
                    raise BenchFailure(f"{tid}: {upd.result.failure_code} {upd.result.failure_message}")
                break
        else:
            raise BenchFailure(f"watch of {tid} ended without a terminal update")
        total.append(t2 - t0)
        submit.append(t1 - t0)
        if time.monotonic() > deadline:
            raise BenchFailure(f"latency run exceeded {timeout}s after {i + 1} tasks")
    total.sort()
    submit.sort()
    return {"tasks": n,
            "p50_ms": _ms(percentile(total, 50)), "p90_ms": _ms(percentile(total, 90)),
            "p99_ms": _ms(percentile(total, 99)), "max_ms": _ms(total[-1]),
            "mean_ms": _ms(statistics.fmean(total)),
            "submit_rpc_p50_ms": _ms(percentile(submit, 50)), "submit_rpc_p99_ms": _ms(percentile(submit, 99))}


# ---- (b) and (c) over one session -------------------------------------------------------

# The session's first answer may take seconds on a loaded machine or under callgrind
# (bench/instructions.py, ~50x slower): the client's 1 s default failed (bs) there.
SESSION_CONNECT_S = 30.0


async def session_task_throughput(addr: str, n: int, inflight: int, timeout: float,
                                  token=TOKEN_FROM_ENV) -> dict:
    async with WorkerClient(addr, token=token, connect_timeout_s=SESSION_CONNECT_S) as client:
        t0 = time.perf_counter()
        done = 0
        bad: list[str] = []

        async def run() -> None:
            nonlocal done
            async for o in client.map("add1", ([i] for i in range(n)), concurrency=inflight):
                done += 1
                if not o.ok or len(o.outputs) != 1:
                    bad.append(f"{o.task_id}: {o.state} {o.failure_code} {o.failure_message}")
        await asyncio.wait_for(run(), timeout)
        secs = time.perf_counter() - t0
    if bad or done != n:
        raise BenchFailure(f"{len(bad)} of {n} session tasks failed ({done} reported), e.g. {bad[:1]}")
    return {"tasks": n, "inflight": inflight, "seconds": round(secs, 4), "tasks_per_s": _rate(n, secs)}


async def session_latency(addr: str, n: int, timeout: float, token=TOKEN_FROM_ENV) -> dict:
    total: list[float] = []
    async with WorkerClient(addr, token=token, connect_timeout_s=SESSION_CONNECT_S) as client:
        deadline = time.monotonic() + timeout
        for i in range(n):
            t0 = time.perf_counter()
            o = await client.submit([("add1", [i])])
            total.append(time.perf_counter() - t0)
            if not o.ok or o.outputs != [i + 1]:
                raise BenchFailure(f"{o.task_id}: {o.state} {o.failure_code} {o.failure_message}")
            if time.monotonic() > deadline:
                raise BenchFailure(f"session latency run exceeded {timeout}s after {i + 1} tasks")
    total.sort()
    return {"tasks": n,
            "p50_ms": _ms(percentile(total, 50)), "p90_ms": _ms(percentile(total, 90)),
            "p99_ms": _ms(percentile(total, 99)), "max_ms": _ms(total[-1]),
            "mean_ms": _ms(statistics.fmean(total))}


# ---- (d) ---------------------------------------------------------------------------


async def subcall_rate(client: Client, parents: int, per_parent: int, timeout: float) -> dict:
    tid = new_id("dsub")
    res, secs = await client.run_task(tid, call_list(("subcall_loop", [per_parent, j]) for j in range(parents)),
                                      timeout)
    expect_ok(tid, res, parents)
    want = [per_parent * j + per_parent * (per_parent - 1) // 2 for j in range(parents)]
    if outputs(res) != want:
        raise BenchFailure(f"task {tid}: wrong subcall_loop outputs")
    n = parents * per_parent
    return {"parents": parents, "subcalls_per_parent": per_parent, "subcalls": n, "seconds": round(secs, 4),
            "subcalls_per_s": _rate(n, secs)}


async def io_rate(client: Client, parents: int, per_parent: int, timeout: float) -> dict:
    tid = new_id("dio")
    res, secs = await client.run_task(tid, call_list(("io_loop", [per_parent, j]) for j in range(parents)),
                                      timeout)
    expect_ok(tid, res, parents)
    if any(o != per_parent for o in outputs(res)):
        raise BenchFailure(f"task {tid}: an io_loop output is not {per_parent}")
    n = parents * per_parent
    return {"parents": parents, "io_per_parent": per_parent, "io_round_trips": n, "seconds": round(secs, 4),
            "io_round_trips_per_s": _rate(n, secs)}


# ---- (r) ---------------------------------------------------------------------------


async def rpc_reads(client: Client, parents: int, per_parent: int, repeat: int, timeout: float) -> dict:
    """`parents` concurrent calls of one task, each `per_parent` sequential
    eth_getBalance reads through the Worker's rpc backend (repeat: see rpc_loop)."""
    tid = new_id("rpc")
    res, secs = await client.run_task(tid, call_list(("rpc_loop", [per_parent, j, repeat]) for j in range(parents)),
                                      timeout)
    expect_ok(tid, res, parents)
    n = parents * per_parent
    return {"parents": parents, "reads_per_parent": per_parent, "repeat": repeat, "reads": n,
            "seconds": round(secs, 4), "reads_per_s": _rate(n, secs)}


async def rpc_direct(url: str, parents: int, per_parent: int, timeout: float) -> dict:
    """The same reads by one Python client straight to the node: aiohttp on this
    loop, `parents` coroutines each reading sequentially, one POST per read."""
    import aiohttp
    import orjson

    async def reader(session, j: int) -> None:
        for i in range(per_parent):
            body = orjson.dumps({"jsonrpc": "2.0", "id": i, "method": "eth_getBalance",
                                 "params": ["0xb10c%018x%018x" % (10_000 + j, i), "latest"]})
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                doc = orjson.loads(await r.read())
            if doc.get("result") != "0x0":
                raise BenchFailure(f"direct eth_getBalance answered {doc!r}")

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        t0 = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(reader(session, j) for j in range(parents))), timeout)
        secs = time.perf_counter() - t0
    n = parents * per_parent
    return {"parents": parents, "reads_per_parent": per_parent, "reads": n, "seconds": round(secs, 4),
            "reads_per_s": _rate(n, secs)}


# ---- (e) ---------------------------------------------------------------------------


async def rss_queued(client: Client, worker, n: int, sleep_ms: int, task_timeout_ms: int,
                     timeout: float) -> dict:
    """Idle RSS (after a warm-up, settled), then RSS while one task holds `n` calls of
    which the executors run only their in-flight cap. bytes/queued call =
    (loaded - idle) / queued: everything the worker keeps for a waiting call
    (builder output, dispatcher records, args) over the baseline."""
    await asyncio.sleep(1.0)
    idle = await _settled_rss(worker)
    dispatched0 = await asyncio.to_thread(worker.metric, "blockx_calls_dispatched_total")
    tid = new_id("e")
    # Distinct args: identical calls of one task would join one singleflight.
    payload = call_list(("sleep_ms", [sleep_ms + i]) for i in range(n))
    t0 = time.perf_counter()
    await client.submit(task_request(tid, payload, timeout_ms=task_timeout_ms), 60)

    async def building_done() -> bool:
        res = await client.stub.GetTaskResult(pb.GetTaskResultRequest(task_id=tid), timeout=10)
        if res.state >= pb.TASK_STATE_SUCCEEDED:
            raise BenchFailure(f"task {tid} ended before its calls were queued: "
                               f"{res.result.failure_code} {res.result.failure_message}")
        d = await asyncio.to_thread(worker.metric, "blockx_calls_dispatched_total")
        return res.state == pb.TASK_STATE_RUNNING and d - dispatched0 > 0
    await wait_until(building_done, 60, "the queued task's first dispatch")
    await asyncio.sleep(0.5)
    samples = []
    for _ in range(6):
        samples.append(worker.rss_bytes())
        await asyncio.sleep(0.2)
    loaded = max(samples)
    dispatched = int(await asyncio.to_thread(worker.metric, "blockx_calls_dispatched_total") - dispatched0)
    queued = n - dispatched
    if queued <= 0:
        raise BenchFailure("no call stayed queued: raise --rss-calls or the sleep")
    loaded_after_s = time.perf_counter() - t0
    # The task times out; its calls are cancelled and forgotten.
    res = (await client.watch([tid], timeout))[tid]
    if res.state != pb.TASK_STATE_FAILED or res.failure_code != "TIMED_OUT":
        raise BenchFailure(f"task {tid} should have timed out, ended {pb.TaskState.Name(res.state)} "
                           f"{res.failure_code}")
    await asyncio.sleep(1.0)
    after = worker.rss_bytes()
    return {"calls": n, "executors": worker.executors, "dispatched": dispatched, "queued": queued,
            "rss_idle_bytes": idle, "rss_queued_bytes": loaded, "rss_after_task_bytes": after,
            "bytes_per_queued_call": round((loaded - idle) / queued, 1),
            "bytes_per_call_of_task": round((loaded - idle) / n, 1),
            "seconds_to_measure": round(loaded_after_s, 3)}


async def _settled_rss(worker, samples: int = 5) -> int:
    values = []
    for _ in range(samples):
        values.append(worker.rss_bytes())
        await asyncio.sleep(0.1)
    return int(statistics.median(values))


# ---- (g) ---------------------------------------------------------------------------


async def _peak_rss_while(worker, coro, interval: float = 0.1) -> tuple[object, int]:
    """Run `coro`, sampling the worker's RSS meanwhile: (its result, peak bytes)."""
    peak = worker.rss_bytes()
    task = asyncio.ensure_future(coro)
    while not task.done():
        peak = max(peak, worker.rss_bytes())
        await asyncio.wait({task}, timeout=interval)
    return task.result(), peak


async def bundle_pipeline(client: Client, worker, bundle: str, rows: int, targets: list[str],
                          timeout: float, scans: tuple[str, ...] = ("rangeScan", "dbscan"),
                          warm: tuple[str, int] | None = None, idle_s: float = 0.0) -> dict:
    """(g) First the scans alone (`scans`, in order): rangeScan of `rows` calls,
    dbscan of as many rows from DuckDB (dbscan) or PostgreSQL (dbscan_pg), each
    calling add1 (same output sizes): the same peak says the scan holds no
    per-row state beyond the outputs any task collects. Then
    `rows` Parquet rows -> bundleScan -> row_v -> tableUpserts, once per target
    source (target "bundle": bundleWrite into one Parquet file instead; `warm`:
    (files, rows) of the same task run small first, so the RSS before already
    holds what a first use loads): rows/s submit -> terminal (scan, calls and the
    one-transaction upsert or the file),
    the rows written, and the worker's RSS before, at its peak and a second after
    the task, and with `idle_s`, `idle_s` after it as well (rss_idle_bytes: once the
    DuckDB sources' idle close has run; the RSS before is then read after the warm-up
    was left idle as long) (the peak includes whatever outputs wait for the writer and its
    column buffers: all of them when the writer runs after the Calls phase, a
    bounded buffer when it consumes settled batches)."""
    out: dict = {"rows": rows}
    all_scans = {
        "rangeScan": ("rangeScan", {"functionId": "add1", "start": 0, "stop": rows}),
        "dbscan": ("dbscan", {"source": "local", "functionId": "add1", "args": "columns",
                              "query": f"SELECT i FROM range({rows}) t(i)"}),
        "dbscan_pg": ("dbscan", {"source": "main", "functionId": "add1", "args": "columns",
                                 "query": "SELECT i FROM generate_series(0, $1) AS g(i)", "params": [rows - 1]}),
    }
    for label in scans:
        builder, body = all_scans[label]
        tid = new_id(f"f-{label}")
        req = task_request(tid, json.dumps(body).encode(), timeout_ms=int(timeout * 1000))
        req.task.function_call.type = builder
        rss0 = worker.rss_bytes()
        (res, secs), peak = await _peak_rss_while(worker, client.run_task_req(req, tid, timeout))
        expect_ok(tid, res, rows)
        out[f"scan_{label}"] = {"seconds": round(secs, 3), "calls_per_s": _rate(rows, secs),
                                  "rss_before_bytes": rss0, "rss_peak_bytes": peak}
    def writer_task(target: str, files: str, tid: str):
        req = task_request(tid, json.dumps({"files": files, "functionId": "row_v"}).encode(),
                           timeout_ms=int(timeout * 1000))
        req.task.function_call.type = "bundleScan"
        if target == "bundle":             # bundleWrite: one Parquet file under the bundle root
            req.task.result_handler.type = "bundleWrite"
            req.task.result_handler.config = json.dumps({"dir": "bench-out"}).encode()
        else:
            req.task.result_handler.type = "tableUpserts"
            req.task.result_handler.config = json.dumps({"target": target, "table": f"bench_{tid.replace('-', '_')}",
                                                         "key": ["id"], "createTable": True}).encode()
        return req

    for target in targets:
        if warm is not None:               # the same task, small, first: its first use is loaded
            wid = new_id(f"w-{target}")
            res, _secs = await client.run_task_req(writer_task(target, warm[0], wid), wid, timeout)
            expect_ok(wid, res, None if res.outputs_written else warm[1])
            await asyncio.sleep(max(1.0, idle_s))
        tid = new_id(f"f-{target}")
        req = writer_task(target, bundle, tid)
        rss0 = worker.rss_bytes()
        (res, secs), peak = await _peak_rss_while(worker, client.run_task_req(req, tid, timeout))
        # A writer that streams reports the outputs it consumed and keeps only a few.
        expect_ok(tid, res, None if res.outputs_written else rows)
        if res.outputs_written and res.outputs_written != rows:
            raise BenchFailure(f"task {tid}: {res.outputs_written} outputs written, expected {rows}")
        written = json.loads(res.plugin_results[0].details)["rows"]
        if written != rows:
            raise BenchFailure(f"task {tid}: {written} rows written, expected {rows}")
        await asyncio.sleep(1.0)          # the terminal path's last frees
        out[target] = {"seconds": round(secs, 3), "rows_per_s": _rate(rows, secs),
                       "rows_written": written, "outputs_written": res.outputs_written,
                       "outputs_in_result": len(res.outputs), "rss_before_bytes": rss0,
                       "rss_peak_bytes": peak, "rss_after_bytes": worker.rss_bytes()}
        if idle_s > 1.0:
            await asyncio.sleep(idle_s - 1.0)
            out[target]["rss_idle_bytes"] = worker.rss_bytes()
    return out
