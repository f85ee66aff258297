"""blockx.client.Cluster against a real etcd and real Worker processes: discovery,
placement on free slots, failover (SIGKILL, drain), an etcd outage."""
import asyncio
import signal
import time

import pytest

from blockx.client import Cluster, NoSlot, NotFound, WorkerClient
from tests.support.etcd import EtcdServer
from tests.support.fleet import start_workers, until, wait_registered
from tests.support.worker import WorkerProcess

pytestmark = pytest.mark.e2e


@pytest.fixture
def etcd():
    server = EtcdServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def fleet(etcd, functions_dir):
    started: list[WorkerProcess] = []

    def _start(n, extra=None):
        ws = start_workers(etcd, n, functions_dir, extra)
        started.extend(ws)
        return ws

    yield _start
    for w in started:
        try:
            w.stop()
        except AssertionError:
            pass


def addr(w):
    return f"127.0.0.1:{w.port}"


async def test_failover_under_sigkill_and_drain(etcd, fleet):
    """3,000 tasks through one Cluster while one worker is SIGKILLed and another
    drained: every task id ends exactly once, SUCCEEDED; once the drained worker
    is draining or gone in the view, nothing more is placed on it."""
    w_kill, w_drain, w_keep = fleet(3, {"TASK_SLOTS": "64", "DRAIN_TIMEOUT_MS": "20000"})
    n = 3000
    placements: list[tuple[float, str]] = []
    gone_at: dict[str, float] = {}
    loop = asyncio.get_running_loop()
    async with Cluster(etcd.endpoint, on_placement=lambda a, _t: placements.append((loop.time(), a))) as cluster:
        await until(lambda: len(cluster.workers) == 3, 10, "three workers in the view")
        inner = cluster.view._on_change

        def on_change(a, info):
            if a not in gone_at and (info is None or info.draining):
                gone_at[a] = loop.time()
            inner(a, info)
        cluster.view._on_change = on_change

        outcomes = []
        killed = drained = False
        async for o in cluster.map("sleep_ms", [5] * n, concurrency=150):
            outcomes.append(o)
            if not killed and len(outcomes) >= n // 4:
                w_kill.signal(signal.SIGKILL)
                killed = True
            if not drained and len(outcomes) >= n // 2:
                w_drain.signal(signal.SIGTERM)
                drained = True
    assert killed and drained
    ids = [o.task_id for o in outcomes]
    assert len(ids) == n and len(set(ids)) == n, "every task id ends exactly once"
    bad = [(o.task_id, o.state, o.failure_code, o.failure_message) for o in outcomes if o.state != "SUCCEEDED"]
    assert not bad, bad[:5]
    assert all(o.outputs == [5] for o in outcomes)
    moved = [o for o in outcomes if o.attempts > 1]
    assert moved, "tasks that were running on the killed worker ran again elsewhere"
    assert all(o.worker != addr(w_kill) for o in moved)
    assert not [o for o in outcomes if o.worker == addr(w_kill) and o.attempts > 1]
    assert addr(w_drain) in gone_at, "the drained worker left the view"
    late = [t for t, a in placements if a == addr(w_drain) and t > gone_at[addr(w_drain)]]
    assert late == [], f"{len(late)} task(s) placed on the drained worker after it left the view"
    assert w_drain.wait_exit(30) == 0
    by_worker = {}
    for o in outcomes:
        by_worker[o.worker] = by_worker.get(o.worker, 0) + 1
    assert by_worker.get(addr(w_keep), 0) > n // 3


async def test_placement_follows_free_slots(etcd, fleet):
    """With one worker's slots held by leases, new tasks go to the others."""
    ws = fleet(3, {"TASK_SLOTS": "4"})
    full = ws[0]
    async with WorkerClient(addr(full)) as direct:
        for i in range(4):
            await direct.request_slot(f"hold-{i}", ttl_ms=60_000)
        with pytest.raises(NoSlot):
            await direct.submit(calls=[("add", [1, 1])])
        async with Cluster(etcd.endpoint) as cluster:
            await until(lambda: len(cluster.workers) == 3
                        and cluster.workers[addr(full)].free_slots == 0, 10, "the full worker's heartbeat")
            outs = []
            for batch in range(10):
                outs += await asyncio.gather(*(cluster.submit(calls=[("add", [batch, k])]) for k in range(2)))
            assert all(o.ok for o in outs)
            assert {o.worker for o in outs} <= {addr(ws[1]), addr(ws[2])}
            assert cluster.placed.get(addr(full), 0) == 0, "placement must not even try the full worker"
            assert cluster.refusals == 0


async def test_etcd_outage_keeps_known_workers_and_sees_new_ones(etcd, fleet, functions_dir):
    w1, = fleet(1)
    async with Cluster(etcd.endpoint) as cluster:
        await until(lambda: addr(w1) in cluster.workers, 10, "the worker in the view")
        assert (await cluster.submit(calls=[("add", [1, 2])])).outputs == [3]
        await etcd.astop()
        await until(lambda: not cluster.view.connected, 10, "the view to notice the outage")
        # Tasks keep flowing to the known worker while etcd is down.
        outs = await asyncio.gather(*(cluster.submit(calls=[("add", [i, i])]) for i in range(20)))
        assert [o.outputs for o in outs] == [[2 * i] for i in range(20)]
        assert {o.worker for o in outs} == {addr(w1)}
        # A worker started during the outage is seen once etcd is back.
        w2 = WorkerProcess({"ETCD_ENDPOINTS": etcd.endpoint, "WORKER_HEARTBEAT_INTERVAL": "100ms",
                            "EXECUTOR_COUNT": "1"}, functions_dir=functions_dir, executors=1)
        try:
            await asyncio.to_thread(w2.start)
            await asyncio.sleep(0.5)
            assert addr(w2) not in cluster.workers
            await etcd.astart()
            await until(lambda: addr(w2) in cluster.workers and addr(w1) in cluster.workers, 20,
                        "both workers in the view after etcd returns")
            assert cluster.view.connected and cluster.view.outages == 1, "the outage is reported once"
            # Hold w1's view busy so the next tasks land on w2 too.
            outs = await asyncio.gather(*(cluster.submit(calls=[("add", [i, 1])]) for i in range(40)))
            assert all(o.ok for o in outs)
            assert addr(w2) in {o.worker for o in outs}
        finally:
            w2.stop()


async def test_retryable_failures_are_resubmitted_only_when_asked(etcd, fleet):
    a, b = fleet(2)
    async with Cluster(etcd.endpoint, max_resubmits=1) as cluster:
        await until(lambda: len(cluster.workers) == 2, 10, "two workers in the view")
        plain = await cluster.submit(calls=[("sleep_ms", [2000])], timeout_ms=200)
        assert plain.state == "FAILED" and plain.retryable and plain.attempts == 1, plain
        again = await cluster.submit(calls=[("sleep_ms", [2000])], timeout_ms=200, resubmit_retryable=True)
        assert again.state == "FAILED" and again.failure_code == plain.failure_code
        assert again.attempts == 2 and cluster.resubmits == 1
        assert cluster.placed == {addr(a): 1, addr(b): 2} or cluster.placed == {addr(a): 2, addr(b): 1}


async def test_a_hung_worker_that_leaves_the_registry_has_its_tasks_resubmitted(etcd, fleet):
    """SIGSTOP: the session stays open but nothing answers; once its key is gone the
    cluster probes it, gives up after probe_timeout_s and runs the task elsewhere."""
    import aetcd
    a, b = fleet(2)
    async with Cluster(etcd.endpoint, probe_timeout_s=0.5) as cluster:
        await until(lambda: len(cluster.workers) == 2, 10, "two workers in the view")
        first = asyncio.ensure_future(cluster.submit(calls=[("sleep_ms", [1500])], task_id="hung-1"))
        await until(lambda: cluster.placement.inflight, 5, "the task in flight")
        victim = next(iter(cluster.placement.inflight))
        other = addr(b) if victim == addr(a) else addr(a)
        hung = a if victim == addr(a) else b
        hung.signal(signal.SIGSTOP)
        try:
            c = aetcd.Client(*etcd.host_port, timeout=2)
            try:
                await c.delete(("/blockx/workers/" + victim).encode())
            finally:
                await c.close()
            t0 = time.monotonic()
            out = await asyncio.wait_for(first, 15)
            assert out.ok and out.worker == other and out.attempts == 2, out
            assert time.monotonic() - t0 < 5
        finally:
            hung.signal(signal.SIGCONT)


async def test_one_live_copy_per_task_id_watch_and_result(etcd, fleet):
    fleet(2)
    async with Cluster(etcd.endpoint) as cluster:
        await until(lambda: len(cluster.workers) == 2, 10, "two workers in the view")
        same = [cluster.submit(calls=[("sleep_ms", [300])], task_id="dup-1") for _ in range(3)]
        watched = []

        async def watch():
            await until(lambda: "dup-1" in cluster._tasks and cluster._tasks["dup-1"].worker, 5, "placement")
            async for upd in cluster.watch(["dup-1"]):
                watched.append(upd)
        outs, _ = await asyncio.gather(asyncio.gather(*same), watch())
        assert sum(cluster.placed.values()) == 1, "a second submit of an id in flight places no copy"
        assert all(o is outs[0] for o in outs) and outs[0].outputs == [300]
        assert watched[-1].is_terminal and watched[-1].outcome.outputs == [300]
        assert (await cluster.result("dup-1")).outputs == [300]
        with pytest.raises(NotFound):
            await cluster.result("never-submitted")


async def test_an_id_submitted_without_waiting_goes_back_to_its_worker(etcd, fleet):
    fleet(3)
    async with Cluster(etcd.endpoint) as cluster:
        await until(lambda: len(cluster.workers) == 3, 10, "three workers in the view")
        first = await cluster.submit(calls=[("sleep_ms", [300])], task_id="nw-1", wait=False)
        assert first.state in ("ALLOCATED", "RUNNING")
        # Waiting submits of the same id (one while it runs, one after) land on the same
        # worker and get its one result: no second copy anywhere.
        again = await cluster.submit(calls=[("sleep_ms", [300])], task_id="nw-1")
        later = await cluster.submit(calls=[("add", [1, 1])], task_id="nw-1")
        assert again.worker == later.worker == first.worker
        assert again.outputs == later.outputs == [300]
        assert set(cluster.placed) == {first.worker}


async def test_cancel_reaches_the_worker_that_holds_the_task_and_is_never_resubmitted(etcd, fleet):
    fleet(2)
    async with Cluster(etcd.endpoint, resubmit_retryable=True) as cluster:
        await until(lambda: len(cluster.workers) == 2, 10, "two workers in the view")
        waiting = asyncio.get_running_loop().create_task(
            cluster.submit(calls=[("sleep_ms", [4_000])], task_id="cl-cancel"))
        await until(lambda: "cl-cancel" in cluster._tasks and cluster._tasks["cl-cancel"].worker, 5, "placement")
        where = cluster._tasks["cl-cancel"].worker
        out = await cluster.cancel("cl-cancel", "cluster says stop")
        assert (out.state, out.failure_code, out.worker, out.raw.cancelled) == ("FAILED", "CANCELLED", where, True)
        final = await asyncio.wait_for(waiting, 10)        # the waiting submit ends with the cancel
        assert final.failure_code == "CANCELLED" and final.attempts == 1 and cluster.resubmits == 0
        assert sum(cluster.placed.values()) == 1
        with pytest.raises(NotFound):
            await cluster.cancel("never-submitted")
