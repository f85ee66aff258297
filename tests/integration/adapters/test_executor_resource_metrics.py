"""Executor RSS / CPU from real heartbeats over a real Unix socket reach
/metrics through ExecutorAdapter.resource_usage: the right
labels and values, a restarted executor with the same id (a new process whose
CPU starts near 0) reads as a counter reset, and a lost executor has no series."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from prometheus_client.parser import text_string_to_metric_families

from blockx.adapters.executor import ExecutorAdapter
from blockx.adapters.telemetry.metrics import Metrics
from blockx.protocol import messages as m

from .fake_executor import FakeExecutor, RecordingHandler, wait_until


def executor_samples(metrics: Metrics) -> dict[tuple, float]:
    out = {}
    for fam in text_string_to_metric_families(metrics.render().decode()):
        for s in fam.samples:
            if s.name.startswith("blockx_executor_memory") or s.name.startswith("blockx_executor_cpu"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def mem(eid):
    return ("blockx_executor_memory_bytes", (("executor", eid),))


def cpu(eid, mode):
    return ("blockx_executor_cpu_seconds_total", (("executor", eid), ("mode", mode)))


@pytest.fixture
async def wired():
    d = tempfile.mkdtemp(prefix="bxr-", dir="/tmp")
    metrics = Metrics(process_metrics=False)
    adapter = ExecutorAdapter(os.path.join(d, "w.sock"), metrics=metrics)
    adapter.handler = handler = RecordingHandler()
    metrics.executor_usage_fn = adapter.resource_usage      # what app.run wires
    await adapter.start()
    fakes: list[FakeExecutor] = []

    async def connect(eid: str) -> FakeExecutor:
        fake = await FakeExecutor(adapter.socket_path, eid, secret=adapter.credentials.issue(eid)).connect()
        fakes.append(fake)
        return fake

    yield adapter, handler, metrics, connect
    await adapter.close()
    for f in fakes:
        await f.close()
    shutil.rmtree(d, ignore_errors=True)


async def test_heartbeat_values_become_labelled_series(wired):
    adapter, handler, metrics, connect = wired
    a, b = await connect("exec-0"), await connect("exec-1")
    assert executor_samples(metrics) == {}          # connected, no Heartbeat yet: not attached
    a.heartbeat(memoryBytes=40_000_000, cpuUserMs=1_200, cpuSystemMs=300)
    b.heartbeat(memoryBytes=60_000_000, cpuUserMs=50, cpuSystemMs=7)
    await handler.wait_attached("exec-1")
    await handler.wait_attached("exec-0")
    assert executor_samples(metrics) == {
        mem("exec-0"): 40_000_000, cpu("exec-0", "user"): 1.2, cpu("exec-0", "system"): 0.3,
        mem("exec-1"): 60_000_000, cpu("exec-1", "user"): 0.05, cpu("exec-1", "system"): 0.007,
    }
    # Later heartbeats move the values; the connection holds them, the scrape reads them.
    a.heartbeat(memoryBytes=45_000_000, cpuUserMs=2_000, cpuSystemMs=400)
    await a.wait_frames(m.HEARTBEAT_ACK, 2)
    s = executor_samples(metrics)
    assert (s[mem("exec-0")], s[cpu("exec-0", "user")], s[cpu("exec-0", "system")]) == (45_000_000, 2.0, 0.4)


async def test_restarted_executor_resets_its_counter_and_a_lost_one_disappears(wired):
    adapter, handler, metrics, connect = wired
    old = await connect("exec-0")
    other = await connect("exec-1")
    old.heartbeat(memoryBytes=90_000_000, cpuUserMs=30_000, cpuSystemMs=2_000)
    other.heartbeat(memoryBytes=10_000_000, cpuUserMs=10, cpuSystemMs=1)
    await handler.wait_attached("exec-0")
    await handler.wait_attached("exec-1")
    assert executor_samples(metrics)[cpu("exec-0", "user")] == 30.0
    # The pool restarts exec-0: a new process, same id, CPU from ~0 again.
    await old.close()
    await handler.wait_lost("exec-0")
    new = await connect("exec-0")
    new.heartbeat(memoryBytes=20_000_000, cpuUserMs=150, cpuSystemMs=20)
    await handler.wait_attached("exec-0", 2)
    s = executor_samples(metrics)
    assert (s[mem("exec-0")], s[cpu("exec-0", "user")], s[cpu("exec-0", "system")]) == (20_000_000, 0.15, 0.02)
    # exec-1 goes away: its three series are gone, exec-0's stay.
    await other.close()
    await handler.wait_lost("exec-1")
    await wait_until(lambda: mem("exec-1") not in executor_samples(metrics), what="exec-1 series gone")
    assert sorted(executor_samples(metrics)) == sorted([mem("exec-0"), cpu("exec-0", "user"),
                                                         cpu("exec-0", "system")])
