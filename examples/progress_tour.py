# examples/progress_tour.py: a task's progress and the worker's status, e.g.
#   BLOCKX_ADDR=127.0.0.1:8081 .venv/bin/python examples/progress_tour.py
import asyncio
import os

from blockx.client import WorkerClient

ADDR = os.environ.get("BLOCKX_ADDR", "127.0.0.1:8081")


async def main() -> None:
    async with WorkerClient(ADDR) as client:
        calls = [("sleep_ms", [200 + i]) for i in range(20)]
        task = await client.submit(calls, wait=False)
        async for update in client.watch([task.task_id]):
            if update.progress is not None:                           # from the Calls phase on
                p = update.progress
                print(update.state, f"{p.done}/{p.total}", "failed", p.failed)
        # ... RUNNING 0/20 failed 0, then (every 250 ms at most) ..., SUCCEEDED 20/20 failed 0
        status = await client.status()                                # GetWorkerStatus
        print("slots", status.slots.free, "free of", status.slots.total)
        for e in status.executors:
            print(e.executor_id, e.state, e.pid > 0, e.rss_bytes > 0)     # exec-0 HEALTHY True True
        c = status.counters                                           # cumulative: rates are deltas
        print("tasks succeeded", c.tasks_succeeded, "calls completed", c.calls_completed)


asyncio.run(main())
