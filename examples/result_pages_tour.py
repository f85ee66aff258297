# examples/result_pages_tour.py: a result larger than one message comes in pages. Run it against a
# worker (`make serve ARGS="--profile dev"`), e.g.
#   BLOCKX_ADDR=127.0.0.1:8081 .venv/bin/python examples/result_pages_tour.py
import asyncio
import os

from blockx.client import WorkerClient

ADDR = os.environ.get("BLOCKX_ADDR", "127.0.0.1:8081")
N = 300_000                                                         # ~2 MB of outputs: two 1 MiB pages


async def main() -> None:
    # channel_options=(): gRPC's default 4 MiB receive limit, like any client that did not raise it
    async with WorkerClient(ADDR, channel_options=()) as client:
        first = await client.submit(calls=[("echo", [i]) for i in range(N)])   # the terminal update
        print(first.state, first.outputs_total, first.outputs_truncated)  # SUCCEEDED 300000 True
        every = await client.complete(first)                        # the pages after the first, in order
        print(len(every.outputs), every.outputs[:3], every.outputs[-1])     # 300000 [0, 1, 2] 299999
        page = (await client.result_page(first.task_id, offset=N - 2)).result   # one GetTaskResult page
        print(page.outputs_offset, list(page.outputs), page.outputs_truncated)  # 299998 [b'299998', b'299999'] False
        total = 0
        async for output in client.outputs(first.task_id):         # every output, a page in memory at a time
            total += output
        print(total == N * (N - 1) // 2)                            # True


asyncio.run(main())
