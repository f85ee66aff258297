"""A session that breaks while submits wait for their reply: each caller gets
SessionBroken and no future is left with an exception nobody retrieved."""
import asyncio
import gc

import grpc
import pytest

from blockx.client import SessionBroken, WorkerClient
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc


class _BreaksOnFirstBatch(pb_grpc.WorkerServiceServicer):
    async def TaskSession(self, request_iterator, context):
        await context.send_initial_metadata(())        # the Worker accepts the session, as it does
        async for _batch in request_iterator:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "going away")
        if False:  # pragma: no cover - makes this an async generator
            yield None


async def test_waiting_submits_get_session_broken_and_leave_no_unretrieved_future():
    server = grpc.aio.server()
    pb_grpc.add_WorkerServiceServicer_to_server(_BreaksOnFirstBatch(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    loop = asyncio.get_running_loop()
    unretrieved = []
    old = loop.get_exception_handler()
    loop.set_exception_handler(lambda _l, ctx: unretrieved.append(ctx.get("message")))
    try:
        async with WorkerClient(f"127.0.0.1:{port}") as c:
            results = await asyncio.gather(*(c.submit(calls=[("add", [i, i])]) for i in range(5)),
                                           return_exceptions=True)
        assert all(isinstance(r, SessionBroken) for r in results), results
        del results
        for _ in range(3):
            gc.collect()
            await asyncio.sleep(0)
        assert [m for m in unretrieved if "never retrieved" in (m or "")] == []
    finally:
        loop.set_exception_handler(old)
        await server.stop(None)
