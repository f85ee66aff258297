"""A synchronous facade for scripts and notebooks: ``blockx.client.connect(addr)``.

It runs a WorkerClient on a private event loop in a daemon thread and waits for
each operation; ``map`` and ``watch`` are plain generators. Errors are the same
typed exceptions as the async client's.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Iterator

from blockx.client.outcome import SlotLease, TaskOutcome, TaskUpdate
from blockx.client.trace import TaskTrace
from blockx.client.worker_client import WorkerClient


class SyncWorkerClient:
    """``with connect("127.0.0.1:8081") as c: print(c.submit(calls=[("add", [1, 2])]).outputs)``"""

    def __init__(self, addr: str, **options) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"blockx-client-{addr}", daemon=True)
        self._thread.start()
        self._client = WorkerClient(addr, **options)
        try:
            self._run(self._client.connect())
        except BaseException:
            self._stop_loop()
            raise

    @property
    def addr(self) -> str:
        return self._client.addr

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _iterate(self, agen) -> Iterator:
        try:
            while True:
                try:
                    yield self._run(agen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._run(agen.aclose())

    def submit(self, calls=None, **kwargs) -> TaskOutcome:
        return self._run(self._client.submit(calls, **kwargs))

    def map(self, function_id: str, args_iterable: Iterable, **kwargs) -> Iterator[TaskOutcome]:
        return self._iterate(self._client.map(function_id, args_iterable, **kwargs))

    def watch(self, task_ids: Iterable[str]) -> Iterator[TaskUpdate]:
        return self._iterate(self._client.watch(list(task_ids)))

    def request_slot(self, task_id: str, ttl_ms: int = 0) -> SlotLease:
        return self._run(self._client.request_slot(task_id, ttl_ms))

    def result(self, task_id: str, *, all_outputs: bool = False) -> TaskOutcome:
        return self._run(self._client.result(task_id, all_outputs=all_outputs))

    def complete(self, outcome: TaskOutcome) -> TaskOutcome:
        """Every output of ``outcome`` (see WorkerClient.complete)."""
        return self._run(self._client.complete(outcome))

    def outputs(self, task_id: str) -> Iterator:
        """Every output of an ended task, a page at a time (see WorkerClient.outputs)."""
        return self._iterate(self._client.outputs(task_id))

    def result_pages(self, task_id: str, after=None) -> Iterator:
        return self._iterate(self._client.result_pages(task_id, after))

    def status(self, timeout_s: float = 10.0):
        """GetWorkerStatus (the raw pb.WorkerStatus); see WorkerClient.status."""
        return self._run(self._client.status(timeout_s))

    def trace(self, task_id: str, **kwargs) -> TaskTrace:
        return self._run(self._client.trace(task_id, **kwargs))

    def cancel(self, task_id: str, reason: str = "") -> TaskOutcome:
        """CancelTask; see WorkerClient.cancel."""
        return self._run(self._client.cancel(task_id, reason))

    def list_tasks(self, **kwargs):
        """ListTasks (one page, the raw pb.ListTasksResponse); see WorkerClient.list_tasks."""
        return self._run(self._client.list_tasks(**kwargs))

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self._client.close())
        finally:
            try:
                self._run(_finish_tasks())
            finally:
                self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._loop.is_running():
            self._loop.close()

    def __enter__(self) -> "SyncWorkerClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


async def _finish_tasks(grace_s: float = 1.0) -> None:
    """What ``asyncio.run`` does before it closes its loop: let every other task of
    this loop end (grpc.aio leaves one per call that ends when the call's status
    arrives, an iteration or so after the channel closed), cancel those still
    running after ``grace_s``, and close the async generators. A loop closed with a
    task pending prints "Task was destroyed but it is pending!" when the task is
    collected."""
    me = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not me]
    if others:
        _, late = await asyncio.wait(others, timeout=grace_s)
        for t in late:
            t.cancel()
        if late:
            await asyncio.gather(*late, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()


def connect(addr: str, **options) -> SyncWorkerClient:
    """A synchronous client of the Worker at ``addr`` (host:port), over one session."""
    return SyncWorkerClient(addr, **options)
