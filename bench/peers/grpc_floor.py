"""gRPC's own cost of the unary contract: a WorkerService that does no work.

`python -m bench.peers.grpc_floor` serves, on 127.0.0.1, the two RPCs (b) uses:
SubmitTask answers RUNNING at once, and WatchTasks writes each id's terminal
update, whose output is what the bench's `add1` task returns (the number in the
id, plus one): the messages the Worker writes for a task that ended before its
watch opened (the common case in (b); a task still running costs the Worker one
more update). No tasks run, no token is checked, no state is kept: what this
process spends per task is grpc.aio's own cost of the pattern, the floor under
the Worker's unary path. TaskSession answers each SessionRequestBatch with one
SessionEventBatch holding a `submitted` event per request (RUNNING): a bidi
ping-pong, the floor under a task over a session (make bench's (l)). It prints
its port on the first line of stdout."""
from __future__ import annotations

import asyncio

import grpc
import uvloop

from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc

_RUNNING = pb.TASK_STATE_RUNNING
_SUCCEEDED = pb.TASK_STATE_SUCCEEDED


class FloorService(pb_grpc.WorkerServiceServicer):
    async def SubmitTask(self, request, context):
        return pb.SubmitTaskResponse(task_id=request.task.task_id, state=_RUNNING)

    async def WatchTasks(self, request, context):
        for tid in request.task_ids:
            out = str(int(tid.rsplit("-", 1)[1]) + 1).encode()
            await context.write(pb.TaskUpdate(task_id=tid, state=_SUCCEEDED, is_terminal=True, result=pb.TaskResult(
                state=_SUCCEEDED, outputs=[out])))

    async def TaskSession(self, request_iterator, context):
        async for batch in request_iterator:
            yield pb.SessionEventBatch(events=[pb.SessionEvent(request_id=r.request_id, submitted=pb.SubmitTaskResponse(
                task_id=r.submit.task.task_id, state=_RUNNING)) for r in batch.requests])


async def serve() -> None:
    server = grpc.aio.server()
    pb_grpc.add_WorkerServiceServicer_to_server(FloorService(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    uvloop.run(serve())
