"""The exporter pipe and process: task records batched to a real exporter process
(python -m blockx.adapters.telemetry.otel_exporter), which exports them over OTLP/gRPC to
a real receiver; a process that is gone costs dropped records, never a wait."""
import asyncio
import os

import pytest

from blockx.adapters.telemetry import otel_pipe
from blockx.adapters.telemetry.otel_pipe import ExporterPipe
from blockx.adapters.telemetry.otel_spans import TaskSpans
from blockx.adapters.telemetry.trace_context import incoming
from blockx.core.types import FunctionCall, StartBuilderPhase, TaskResult, TaskState
from tests.support.otlp_receiver import OtlpReceiver

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TP = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.fixture
def receiver(monkeypatch):
    r = OtlpReceiver().start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.endpoint)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    for k in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER"):
        monkeypatch.delenv(k, raising=False)
    yield r
    r.stop()


def _run_task(spans, task_id, state="SUCCEEDED"):
    spans.task_started(task_id, "inst", incoming([("traceparent", TP)]))
    spans.phase_started(StartBuilderPhase(task_id, "", None, FunctionCall("callList", b"")))
    spans.task_ended(task_id, state, TaskResult(TaskState[state]))


async def test_records_reach_the_receiver_as_spans_through_the_exporter_process(receiver):
    pipe = await ExporterPipe.start("pipe-test")
    spans = TaskSpans(pipe)
    for i in range(3):
        _run_task(spans, f"t{i}")
    assert pipe.sent == 0                       # batched: nothing written before FLUSH_S
    await asyncio.sleep(otel_pipe.FLUSH_S + 0.1)
    assert pipe.sent == 3
    got = await asyncio.to_thread(receiver.wait_for, lambda s: len([x for x in s if x.name == "task"]) == 3)
    tasks = sorted((s for s in got if s.name == "task"), key=lambda s: s.attributes["blockx.task.id"])
    assert [s.attributes["blockx.task.id"] for s in tasks] == ["t0", "t1", "t2"]
    assert {s.trace_id for s in tasks} == {TRACE_ID} and {s.resource["service.name"] for s in tasks} == {"pipe-test"}
    [builder] = [s for s in got if s.name == "builder" and s.parent_span_id == tasks[0].span_id]
    assert builder.attributes["blockx.builder"] == "callList"
    await pipe.close()
    assert pipe._proc.returncode == 0


async def test_a_full_batch_is_written_at_once(receiver, monkeypatch):
    monkeypatch.setattr(otel_pipe, "MAX_BATCH", 2)
    pipe = await ExporterPipe.start("pipe-test")
    spans = TaskSpans(pipe)
    _run_task(spans, "a")
    assert pipe.sent == 0
    _run_task(spans, "b")
    assert pipe.sent == 2
    await pipe.close()


async def test_records_for_a_gone_exporter_are_dropped_and_counted(receiver):
    pipe = await ExporterPipe.start("pipe-test")
    spans = TaskSpans(pipe)
    pipe._proc.kill()
    await pipe._proc.wait()
    for _ in range(50):                          # the transport learns the pipe is broken on a write
        _run_task(spans, "t")
        pipe.flush()
        if pipe.dropped:
            break
        await asyncio.sleep(0.01)
    assert pipe.dropped >= 1
    before = pipe.dropped
    _run_task(spans, "late")
    pipe.flush()
    assert pipe.dropped == before + 1
    await pipe.close()                           # no error, no wait


_FORK_HOOK_PROBE = """
import asyncio, os, sys
import uvloop
from blockx.adapters.telemetry.otel_pipe import ExporterPipe

os.register_at_fork(after_in_child=lambda: os.write(2, b"AFTER-FORK HOOK RAN IN THE CHILD\\n"))

async def main():
    pipe = await ExporterPipe.start("fork-probe")
    await pipe.close()

uvloop.run(main())
"""


def test_the_exporter_process_starts_without_running_the_workers_fork_hooks(tmp_path):
    # uvloop's own subprocess support forks and runs the interpreter's after-fork
    # hooks in the child before exec (threading's among them). In a Worker with
    # threads, a lock another thread held at the fork hangs that child, and libuv's
    # spawn, which waits for the exec, hangs the loop with it. The exporter must be
    # started as the executors are: no Python code runs in the child.
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"       # nothing is exported: no span is sent
    done = subprocess.run([sys.executable, "-c", _FORK_HOOK_PROBE], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "AFTER-FORK HOOK RAN IN THE CHILD" not in done.stderr
