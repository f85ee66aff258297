"""The benchmark's own gRPC client (grpc.aio on the caller's uvloop loop)."""
from __future__ import annotations

import asyncio
import functools
import json
import time
from typing import Any, Iterable

import grpc

from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc

TERMINAL_OK = pb.TASK_STATE_SUCCEEDED
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]


class BenchFailure(RuntimeError):
    """A task did not end the way the benchmark needs (the figure would be wrong)."""


def call_list(calls: Iterable[tuple[str, list]]) -> bytes:
    return json.dumps({"calls": [{"functionId": f, "args": a} for f, a in calls]},
                      separators=(",", ":")).encode()


def task_request(task_id: str, payload: bytes, *, timeout_ms: int = 0) -> pb.SubmitTaskRequest:
    return pb.SubmitTaskRequest(task=pb.Task(
        task_id=task_id, task_timeout_ms=timeout_ms,
        function_call=pb.FunctionCallConfig(type="callList", payload=payload)))


class _WithToken:
    """A WorkerService stub whose every call carries the bearer token."""

    def __init__(self, stub, token: str) -> None:
        md = (("authorization", f"Bearer {token}"),)
        for name in ("RequestTaskSlot", "SubmitTask", "GetTaskResult", "WatchTasks", "TaskSession",
                     "GetWorkerStatus", "GetTaskTrace"):
            setattr(self, name, functools.partial(getattr(stub, name), metadata=md))


class Client:
    """``token``: the worker's bearer token (None: a worker with WORKER_AUTH_MODE=none)."""

    def __init__(self, addr: str, token: str | None = None) -> None:
        self.channel = grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS)
        stub = pb_grpc.WorkerServiceStub(self.channel)
        self.stub = stub if token is None else _WithToken(stub, token)

    async def close(self) -> None:
        await self.channel.close()

    async def submit(self, req: pb.SubmitTaskRequest, timeout: float = 30.0) -> pb.SubmitTaskResponse:
        return await self.stub.SubmitTask(req, timeout=timeout)

    async def watch(self, task_ids: list[str], timeout: float) -> dict[str, pb.TaskResult]:
        """Terminal results of every id (one WatchTasks stream)."""
        out: dict[str, pb.TaskResult] = {}
        call = self.stub.WatchTasks(pb.WatchTasksRequest(task_ids=task_ids), timeout=timeout)
        async for upd in call:
            if upd.is_terminal:
                out[upd.task_id] = upd.result
        missing = set(task_ids) - out.keys()
        if missing:
            raise BenchFailure(f"watch ended without terminal updates for {len(missing)} tasks")
        return out

    async def complete(self, task_id: str, res: pb.TaskResult, timeout: float = 60.0) -> pb.TaskResult:
        """``res`` (a first page) with every output: the pages after it, by GetTaskResult."""
        whole = pb.TaskResult()
        whole.CopyFrom(res)
        while res.outputs_truncated:
            res = (await self.stub.GetTaskResult(pb.GetTaskResultRequest(
                task_id=task_id, outputs_offset=res.outputs_offset + len(res.outputs)), timeout=timeout)).result
            whole.outputs.extend(res.outputs)
        whole.outputs_truncated = False
        return whole

    async def run_task(self, task_id: str, payload: bytes, timeout: float, *,
                       task_timeout_ms: int = 0) -> tuple[pb.TaskResult, float]:
        """Submit, watch to terminal; (result, seconds from submit to the terminal update)."""
        t0 = time.perf_counter()
        await self.submit(task_request(task_id, payload, timeout_ms=task_timeout_ms), timeout)
        res = (await self.watch([task_id], timeout))[task_id]
        return res, time.perf_counter() - t0


    async def run_task_req(self, req: pb.SubmitTaskRequest, task_id: str,
                           timeout: float) -> tuple[pb.TaskResult, float]:
        """run_task for a prepared request (another builder, a result handler)."""
        t0 = time.perf_counter()
        await self.submit(req, timeout)
        res = (await self.watch([task_id], timeout))[task_id]
        return res, time.perf_counter() - t0


def expect_ok(task_id: str, res: pb.TaskResult, calls: int | None = None) -> None:
    if res.state != TERMINAL_OK:
        raise BenchFailure(f"task {task_id} ended {pb.TaskState.Name(res.state)}: "
                           f"{res.failure_code} {res.failure_message}")
    n = res.outputs_total or len(res.outputs)          # a result in pages carries its count
    if calls is not None and n != calls:
        raise BenchFailure(f"task {task_id}: {n} outputs for {calls} calls")


def outputs(res: pb.TaskResult) -> list[Any]:
    return [json.loads(o) for o in res.outputs]


async def wait_until(pred, timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not await pred():
        if time.monotonic() > deadline:
            raise BenchFailure(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
