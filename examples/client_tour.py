# examples/client_tour.py: run it against a worker (`make serve ARGS="--profile dev"`), e.g.
#   BLOCKX_ADDR=127.0.0.1:8081 .venv/bin/python examples/client_tour.py
import asyncio
import os

from blockx.client import NotFound, TaskFailed, WorkerClient, connect

ADDR = os.environ.get("BLOCKX_ADDR", "127.0.0.1:8081")


async def main() -> None:
    async with WorkerClient(ADDR) as client:
        outcome = await client.submit(calls=[("add", [1, 2]), ("add1", [41])])
        print(outcome.state, outcome.outputs, outcome.worker)       # SUCCEEDED [3, 42] 127.0.0.1:8081
        squares = sorted([o.outputs[0] async for o in client.map("square", range(10), concurrency=64)])
        print(squares)                                              # [0, 1, 4, ..., 81]
        lease = await client.request_slot("tour-leased", ttl_ms=10_000)
        await client.submit([("sleep_ms", [300])], task_id="tour-leased", slot_id=lease.slot_id, wait=False)
        async for update in client.watch(["tour-leased"]):
            print(update.state, update.is_terminal)                  # RUNNING False, then SUCCEEDED True
        try:
            await client.result("no-such-task")
        except NotFound as err:
            print("NotFound:", err.message)


asyncio.run(main())

with connect(ADDR) as client:                                       # the synchronous facade
    outcome = client.submit(calls=[("sum_squares", [10])])
    print(outcome.outputs)                                          # [285]
    trace = client.trace(outcome.task_id)       # its timeline; trace.write("t.json"), open it in Perfetto
    print(trace.complete, sum(e.get("cat") == "subcall" for e in trace.events()))    # True 10
    try:
        client.submit(calls=[("fail", ["bad input"])]).result()    # the outputs, or TaskFailed
    except TaskFailed as failed:                # str(failed): the failure and its remote traceback
        print(failed.failure_code, failed.remote_traceback.splitlines()[-1])    # CALL_FAILED RuntimeError: bad input
