"""Results in pages, against a real worker: a 1,000,000-output callList task
watched by clients with gRPC's default 4 MiB receive limit (a raw grpc.aio
channel without options, and a TaskSession through blockx.client) gets its
terminal update, and every output is fetched by paging, in order, none missing
or twice; the session goes on with the next task. Then, on a worker with a small
page budget: the CLI and the Cluster print / return every output, a default call
returns the first page, and another identity cannot read any page. On main the
terminal update of such a task is one message of several MiB: the raw watcher and
the session fail with RESOURCE_EXHAUSTED."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import grpc
import pytest

from blockx.client import NotFound, WorkerClient, connect
from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc
from tests.e2e.conftest import make_functions_dir
from tests.support import auth
from tests.support.worker import WorkerProcess

pytestmark = pytest.mark.e2e

MiB = 1024 * 1024
N = 1_000_000
DEFAULT_RECEIVE = 4 * MiB          # gRPC's default receive limit


def echo_task(task_id: str, n: int, start: int = 0) -> pb.Task:
    calls = [{"functionId": "echo", "args": [i]} for i in range(start, start + n)]
    payload = json.dumps({"calls": calls}, separators=(",", ":")).encode()
    return pb.Task(task_id=task_id, function_call=pb.FunctionCallConfig(type="callList", payload=payload))


@pytest.fixture(scope="module")
def million(tmp_path_factory):
    """A worker with the default page budget that takes a 36 MB callList."""
    w = WorkerProcess({"TASK_SLOTS": "8", "RESULT_RETENTION_MS": "600000", "MAX_PAYLOAD_BYTES": str(60 * MiB),
                       "TASK_DEADLINE_MS": "600000"},
                      functions_dir=make_functions_dir(tmp_path_factory.mktemp("fn")), executors=2)
    w.start()
    try:
        yield w
    finally:
        w.stop()


def worker_cpu_s(w) -> float:
    """The worker process's CPU time so far (user + system)."""
    import os
    with open(f"/proc/{w.proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def raw_pages(stub, md, task_id: str, first: pb.TaskResult) -> tuple[list[bytes], int]:
    """Every output by GetTaskResult pages on ``stub`` after ``first``; (outputs, pages)."""
    outs = list(first.outputs)
    r, pages = first, 1
    while r.outputs_truncated:
        offset = r.outputs_offset + len(r.outputs)
        r = (await stub.GetTaskResult(pb.GetTaskResultRequest(task_id=task_id, outputs_offset=offset),
                                      metadata=md, timeout=60)).result
        assert r.outputs_offset == offset and r.outputs_total == first.outputs_total and r.outputs
        outs.extend(r.outputs)
        pages += 1
    return outs, pages


@pytest.mark.timeout(1200)            # a million calls on a shared 2-core machine
async def test_a_million_outputs_reach_default_limit_clients_and_page_in_order(million):
    w = million
    addr = f"127.0.0.1:{w.port}"
    md = auth.metadata(w.token)
    tid = "million"
    expected = [str(i).encode() for i in range(N)]
    raw = grpc.aio.insecure_channel(addr)                     # no options: a 4 MiB receive limit
    client = WorkerClient(addr, channel_options=())           # the same limit, over a TaskSession
    await client.connect()
    try:
        stub = pb_grpc.WorkerServiceStub(raw)
        sub = await stub.SubmitTask(pb.SubmitTaskRequest(task=echo_task(tid, N)), metadata=md, timeout=120)
        assert sub.state in (pb.TASK_STATE_RUNNING, pb.TASK_STATE_SUCCEEDED)

        async def raw_watch():
            last = None
            async for upd in stub.WatchTasks(pb.WatchTasksRequest(task_ids=[tid]), metadata=md, timeout=900):
                last = upd
            return last

        async def session_watch():
            last = None
            async for upd in client.watch([tid]):
                last = upd
            return last

        t0 = time.monotonic()
        upd, supd = await asyncio.gather(raw_watch(), session_watch())
        run_s = time.monotonic() - t0
        for u in (upd, supd.raw):
            assert u.is_terminal and u.state == pb.TASK_STATE_SUCCEEDED
            r = u.result
            assert (r.outputs_total, r.outputs_offset, r.outputs_truncated) == (N, 0, True)
            assert 0 < len(r.outputs) < N and list(r.outputs) == expected[:len(r.outputs)]
            assert u.ByteSize() <= MiB < DEFAULT_RECEIVE
        assert supd.outcome.outputs_truncated and supd.outcome.outputs_total == N

        t0, c0, wc0 = time.monotonic(), time.process_time(), worker_cpu_s(w)
        outs, pages = await raw_pages(stub, md, tid, upd.result)
        raw_s, raw_cpu, raw_wcpu = time.monotonic() - t0, time.process_time() - c0, worker_cpu_s(w) - wc0
        assert len(outs) == N and outs == expected               # in order, none missing, none twice

        t0, c0, wc0 = time.monotonic(), time.process_time(), worker_cpu_s(w)
        whole = await client.complete(supd.outcome)
        session_s, session_cpu, session_wcpu = (time.monotonic() - t0, time.process_time() - c0,
                                                worker_cpu_s(w) - wc0)
        assert whole.outputs == list(range(N)) and not whole.outputs_truncated
        assert supd.outcome.outputs_truncated                       # the outcome in hand is not changed

        t0 = time.monotonic()
        n = 0
        async for o in client.outputs(tid):
            assert o == n
            n += 1
        iter_s = time.monotonic() - t0
        assert n == N
        print(f"\n1,000,000 outputs: task {run_s:.1f} s; {pages} pages of at most 1 MiB; fetched by paging in "
              f"{raw_s:.2f} s wall (raw GetTaskResult; client CPU {raw_cpu:.2f} s, worker CPU {raw_wcpu:.2f} s), "
              f"{session_s:.2f} s wall (WorkerClient.complete over the session, decoding each output; client "
              f"CPU {session_cpu:.2f} s, worker CPU {session_wcpu:.2f} s), {iter_s:.2f} s (WorkerClient.outputs)")

        # the session that received the huge result goes on with the next task
        nxt = await client.submit(calls=[("add", [40, 2])])
        assert nxt.state == "SUCCEEDED" and nxt.outputs == [42] and client.broken is None
        again = await client.result(tid)                          # a default call: the first page
        assert again.outputs_truncated and again.outputs == list(range(len(again.outputs)))
        full = await client.result(tid, all_outputs=True)
        assert full.outputs == list(range(N))
    finally:
        await client.close()
        await raw.close()


# ---- a small page budget: the CLI, the Cluster, the sync client, ownership ----------------

SMALL_PAGE = 16 * 1024
M = 6000


@pytest.fixture(scope="module")
def paged(tmp_path_factory):
    d = tmp_path_factory.mktemp("paged")
    tokens = auth.write_tokens(d, {"alice": "alice-token-0123456789abcdef", "admin": auth.HARNESS_TOKEN})
    w = WorkerProcess({"RESULT_PAGE_BYTES": str(SMALL_PAGE), "TASK_SLOTS": "8", "RESULT_RETENTION_MS": "600000",
                       "WORKER_AUTH_TOKENS_FILE": tokens},
                      functions_dir=make_functions_dir(d))
    w.start()
    try:
        w.stub.SubmitTask(pb.SubmitTaskRequest(task=echo_task("small-pages", M)), timeout=60)
        r = w.wait_terminal("small-pages", timeout=120)
        assert r.outputs_truncated and r.outputs_total == M
        yield w
    finally:
        w.stop()


def test_the_cli_prints_every_output_of_a_paged_result(paged):
    out = subprocess.run([sys.executable, "-m", "blockx", "result", "small-pages", "--compact",
                          "--addr", f"127.0.0.1:{paged.port}"], capture_output=True, timeout=120, check=True)
    res = json.loads(out.stdout)["result"]
    assert res["outputs"] == list(range(M))
    assert (res["outputsTotal"], res["outputsTruncated"]) == (M, False)
    task = json.dumps({"taskId": "cli-pages", "functionCall": {"type": "callList", "payload": {
        "calls": [{"functionId": "echo", "args": [i]} for i in range(M)]}}})
    out = subprocess.run([sys.executable, "-m", "blockx", "submit", "--task-json", "-", "--compact",
                          "--addr", f"127.0.0.1:{paged.port}"], input=task.encode(),
                         capture_output=True, timeout=120, check=True)
    res = json.loads(out.stdout)["result"]
    assert res["outputs"] == list(range(M)) and res["outputsTruncated"] is False


def test_the_sync_client_pages_on_request_and_returns_the_first_page_by_default(paged):
    with connect(f"127.0.0.1:{paged.port}", channel_options=()) as c:
        first = c.result("small-pages")
        assert first.outputs_truncated and first.outputs_total == M and 0 < len(first.outputs) < M
        assert first.outputs == list(range(len(first.outputs)))
        assert c.result("small-pages", all_outputs=True).outputs == list(range(M))
        assert list(c.outputs("small-pages")) == list(range(M))
        out = c.submit(task=echo_task("sync-pages", M, start=10), all_outputs=True)
        assert out.outputs == list(range(10, 10 + M)) and not out.outputs_truncated
        pages = list(c.result_pages("small-pages"))
        assert len(pages) > 2 and all(p.ByteSize() <= SMALL_PAGE for p in pages)


def test_a_limit_of_zero_or_below_and_an_offset_past_the_end_are_invalid_argument(paged):
    s = paged.stub
    for req, says in ((pb.GetTaskResultRequest(task_id="small-pages", outputs_limit=0), "outputs_limit is 0"),
                      (pb.GetTaskResultRequest(task_id="small-pages", outputs_limit=-1), "outputs_limit is -1"),
                      (pb.GetTaskResultRequest(task_id="small-pages", outputs_offset=-5), "outputs_offset is -5"),
                      (pb.GetTaskResultRequest(task_id="small-pages", outputs_offset=M + 1),
                       f"outputs_offset {M + 1} is past the end of task 'small-pages''s {M} outputs")):
        with pytest.raises(grpc.RpcError) as ei:
            s.GetTaskResult(req, timeout=10)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and says in ei.value.details()
    end = s.GetTaskResult(pb.GetTaskResultRequest(task_id="small-pages", outputs_offset=M), timeout=10).result
    assert (list(end.outputs), end.outputs_truncated, end.outputs_total) == ([], False, M)


def test_another_identity_reads_no_page(paged):
    ch = auth.channel(f"127.0.0.1:{paged.port}", token="alice-token-0123456789abcdef")
    try:
        stub = pb_grpc.WorkerServiceStub(ch)
        for offset in (0, 5, M):
            with pytest.raises(grpc.RpcError) as ei:
                stub.GetTaskResult(pb.GetTaskResultRequest(task_id="small-pages", outputs_offset=offset,
                                                           outputs_limit=3), timeout=10)
            assert ei.value.code() == grpc.StatusCode.NOT_FOUND and "small-pages" in ei.value.details()
    finally:
        ch.close()
    with connect(f"127.0.0.1:{paged.port}", token="alice-token-0123456789abcdef") as c:
        with pytest.raises(NotFound):
            list(c.outputs("small-pages"))


async def test_an_idempotent_resubmit_of_a_paged_result_answers_its_first_page(paged):
    async with WorkerClient(f"127.0.0.1:{paged.port}", channel_options=()) as c:
        out = await c.submit(task=echo_task("async-pages", M), all_outputs=True)
        assert out.outputs == list(range(M))
        first = await c.submit(task=echo_task("async-pages", M))           # an idempotent resubmit: page 1
        assert first.outputs_truncated and first.outputs == list(range(len(first.outputs)))


async def test_the_cluster_returns_the_first_page_by_default_and_every_output_when_asked(functions_dir):
    from blockx.client import Cluster
    from tests.support.etcd import EtcdServer
    from tests.support.fleet import start_workers

    etcd = EtcdServer()
    etcd.start()
    try:
        (w,) = start_workers(etcd, 1, functions_dir, {"RESULT_PAGE_BYTES": str(SMALL_PAGE)})
        try:
            async with Cluster(etcd.endpoint) as cluster:
                out = await cluster.submit(task=echo_task("cluster-pages", M), all_outputs=True)
                assert out.outputs == list(range(M)) and not out.outputs_truncated
                assert out.worker == f"127.0.0.1:{w.port}"
                first = await cluster.result("cluster-pages")
                assert first.outputs_truncated and first.outputs_total == M
                assert (await cluster.result("cluster-pages", all_outputs=True)).outputs == list(range(M))
        finally:
            w.stop()
    finally:
        etcd.close()
