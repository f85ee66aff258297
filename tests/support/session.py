"""A raw TaskSession for end-to-end tests: write request batches, read events
(with a bounded wait), and read the stream's final status. It carries the
harness's bearer token unless told another (``token=``, None for none). Protocol-level tests
use it where the client library would hide what is on the wire."""
from __future__ import annotations

import asyncio
import collections
import json

import grpc

from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc
from tests.support import auth


def call_list_task(task_id: str, calls, **fields) -> pb.Task:
    payload = json.dumps({"calls": [{"functionId": f, "args": a} for f, a in calls]}).encode()
    return pb.Task(task_id=task_id, function_call=pb.FunctionCallConfig(type="callList", payload=payload), **fields)


def submit(rid: int, task_id: str, calls, *, follow: bool = True, slot_id: str = "", **fields) -> pb.SessionRequest:
    return pb.SessionRequest(request_id=rid, follow=follow, submit=pb.SubmitTaskRequest(
        task=call_list_task(task_id, calls, **fields), slot_id=slot_id))


def is_progress_only(ev: pb.SessionEvent) -> bool:
    """A progress-only update: a later update of a running task, in the
    state already shown, that only brings new TaskProgress."""
    if ev.request_id or ev.WhichOneof("event") != "update":
        return False
    u = ev.update
    return not u.is_terminal and u.state == pb.TASK_STATE_RUNNING and u.HasField("progress")


class RawSession:
    """``keep_progress=False`` (the default) sets progress-only updates aside in
    ``progress`` so the protocol tests read the state changes they assert on."""

    def __init__(self, port: int, *, keep_progress: bool = False, token: str | None = auth.HARNESS_TOKEN,
                 extra_metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        self.call = pb_grpc.WorkerServiceStub(self.channel).TaskSession(
            metadata=(*(auth.metadata(token) or ()), *extra_metadata) or None)
        self.batches = 0
        self._buf: collections.deque = collections.deque()
        self.ended = False
        self.keep_progress = keep_progress
        self.progress: list[pb.SessionEvent] = []

    async def send(self, *requests: pb.SessionRequest) -> None:
        await self.call.write(pb.SessionRequestBatch(requests=list(requests)))

    async def next_event(self, timeout: float = 10.0) -> pb.SessionEvent:
        while not self._buf:
            batch = await asyncio.wait_for(self.call.read(), timeout)
            if batch is grpc.aio.EOF:
                self.ended = True
                raise EOFError("the session ended")
            self.batches += 1
            if self.keep_progress:
                self._buf.extend(batch.events)
            else:
                for ev in batch.events:
                    (self.progress if is_progress_only(ev) else self._buf).append(ev)
        return self._buf.popleft()

    async def events(self, n: int, timeout: float = 10.0) -> list[pb.SessionEvent]:
        return [await self.next_event(timeout) for _ in range(n)]

    async def until(self, pred, timeout: float = 10.0) -> list[pb.SessionEvent]:
        """Events up to and including the first one ``pred`` accepts."""
        out = []
        while True:
            ev = await self.next_event(timeout)
            out.append(ev)
            if pred(ev):
                return out

    async def barrier(self, rid: int, task_id: str, timeout: float = 10.0) -> list[pb.SessionEvent]:
        """Everything the session sends before the reply to a get_result sent now."""
        await self.send(pb.SessionRequest(request_id=rid, get_result=pb.GetTaskResultRequest(task_id=task_id)))
        evs = await self.until(lambda e: e.request_id == rid, timeout)
        return evs[:-1]

    async def status(self, timeout: float = 10.0) -> tuple[grpc.StatusCode, str]:
        code = await asyncio.wait_for(self.call.code(), timeout)
        return code, await self.call.details()

    async def close(self) -> None:
        self.call.cancel()
        await self.channel.close()


def kind(ev: pb.SessionEvent) -> str:
    return ev.WhichOneof("event")
