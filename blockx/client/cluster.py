"""Cluster: many Workers behind one client, found through their etcd heartbeats.

    async with Cluster("127.0.0.1:2379") as cluster:
        outcome = await cluster.submit(calls=[("add", [1, 2])])
        print(outcome.outputs, outcome.worker, outcome.attempts)     # [3] 10.0.0.7:8081 1

Theory of operation.
- Discovery: a RegistryView follows the registry prefix (one range read, then an
  etcd watch). A worker whose key is deleted or whose lease expires leaves it.
- Placement: blockx.client.placement (power of two choices on free slots, with
  this client's own in-flight count per worker). One TaskSession (WorkerClient)
  per worker, opened on first use and reused; all of this client's tasks to that
  worker share it.
- Failover before a task runs: a refusal (NoSlot, or Unavailable from a draining
  worker, or a registered address where nothing listens or nothing answers within
  ``connect_timeout_s``, told at the first failed attempt: blockx.client.reach)
  places the task on another worker;
  it does not count as a resubmit. When every placeable worker refused, the
  client backs off briefly and tries again, up to ``wait_for_worker_s``.
- Failover after: a session that breaks while the task was submitted (the
  worker died or went away) resubmits the task elsewhere with the same task id,
  at most ``max_resubmits`` times. A worker whose key disappears while this
  client has tasks on it is probed (one GetTaskResult on its session); one that
  does not answer within ``probe_timeout_s`` has its session closed, which
  resubmits its tasks. A drained worker answers, so its running tasks finish
  where they are: the client never keeps two live copies of one task id.
  Retryable task failures (TIMED_OUT, SLOT_LOST, ...) are resubmitted only with
  ``resubmit_retryable=True``, and never to the worker that failed them.
- Each task id gets one outcome: a second submit of an id this client already
  has in flight waits for the first one's outcome instead of placing a copy, and
  an id it placed before (say with ``wait=False``) goes back to the worker that
  has it, which answers idempotently.
  ``TaskOutcome.worker`` says where it ran, ``attempts`` how many runs it took.
- etcd down: the view keeps the last known workers (logged once); sessions to
  them keep working; when etcd returns the prefix is read again.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from blockx.client.bounded import as_completed_bounded
from blockx.credentials import TOKEN_FROM_ENV
from blockx.client.errors import NoSlot, NotFound, SessionBroken, Unavailable
from blockx.client.outcome import TaskOutcome, TaskUpdate
from blockx.client.placement import Placement
from blockx.client.reach import DEFAULT_CONNECT_TIMEOUT_S
from blockx.client.registry import DEFAULT_PREFIX, RegistryView, WorkerInfo
from blockx.client.tasks import build_task
from blockx.client.worker_client import WorkerClient
from blockx.etcd.connection import EtcdConnection
from blockx.worker.v1 import worker_pb2 as pb

log = logging.getLogger("blockx.client.cluster")
# Where finished tasks ran, for watch / result by id afterwards (older ids are
# looked up by asking every worker).
WHERE_REMEMBERED = 100_000


class _Task:
    """One task id this client has in flight: where it is, and its one outcome."""
    __slots__ = ("worker", "attempts", "outcome", "moved")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.worker = ""
        self.attempts = 0
        self.outcome: asyncio.Future = loop.create_future()
        self.moved: asyncio.Event | None = None     # made when a watch follows this task

    def watch_moves(self) -> asyncio.Event:
        if self.moved is None:
            self.moved = asyncio.Event()
        return self.moved

    def place(self, addr: str) -> None:
        self.worker = addr
        if self.moved is not None:
            self.moved.set()
            self.moved = None


class Cluster:
    """``async with Cluster(etcd_endpoints) as c: await c.submit(calls=[("add", [1, 2])])``

    ``etcd_endpoints``: "host:port,..." (TLS and the etcd user then come from the
    ETCD_CA_CERT / ETCD_CERT / ETCD_KEY / ETCD_SERVER_NAME / ETCD_USER /
    ETCD_PASSWORD(_FILE) environment, as the Worker reads them), or a
    ``blockx.etcd.connection.EtcdConnection`` saying all of it."""

    def __init__(self, etcd_endpoints: EtcdConnection | str | Iterable[str], prefix: str = DEFAULT_PREFIX, *,
                 max_resubmits: int = 2, resubmit_retryable: bool = False,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S, wait_for_worker_s: float = 30.0,
                 etcd_wait_s: float = 5.0, probe_timeout_s: float = 3.0,
                 on_placement: Callable[[str, str], None] | None = None,
                 rand: Callable[[], float] = random.random,
                 token: str | None | object = TOKEN_FROM_ENV) -> None:
        if max_resubmits < 0:
            raise ValueError("max_resubmits must be >= 0")
        self.prefix = prefix
        self.max_resubmits = max_resubmits
        self.resubmit_retryable = resubmit_retryable
        self.connect_timeout_s = connect_timeout_s
        self.wait_for_worker_s = wait_for_worker_s
        self.probe_timeout_s = probe_timeout_s
        self._token = token                       # every worker's session carries it (blockx.credentials)
        self._etcd_wait_s = etcd_wait_s
        self._on_placement = on_placement
        self.view = RegistryView(etcd_endpoints, prefix, on_change=self._worker_changed)
        self.placement = Placement(rand)
        self._sessions: dict[str, WorkerClient] = {}
        self._opening: dict[str, asyncio.Future] = {}
        self._tasks: dict[str, _Task] = {}
        self._where: dict[str, str] = {}          # task id -> worker, for watch / result after the fact
        self._background: set[asyncio.Task] = set()
        self._closed = False
        # Counters a caller (or a test) can read: placements per worker, refusals, resubmits.
        self.placed: dict[str, int] = {}
        self.refusals = 0
        self.resubmits = 0

    # ---- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> "Cluster":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def start(self) -> None:
        """Read the registry (waiting up to ``etcd_wait_s``); without etcd the client
        starts anyway and places tasks once the registry can be read."""
        if not await self.view.start(self._etcd_wait_s):
            log.warning("cluster: etcd %s not readable yet (%s); tasks wait for the registry",
                        ",".join(self.view._watch.endpoints), self.view.last_error or "no answer")

    async def close(self) -> None:
        self._closed = True
        for t in list(self._background):
            t.cancel()
        await self.view.stop()
        sessions, self._sessions = self._sessions, {}
        for c in sessions.values():
            await c.close()

    @property
    def workers(self) -> dict[str, WorkerInfo]:
        """The registered workers as last seen: {address: WorkerInfo}."""
        return self.view.workers

    # ---- the public operations ---------------------------------------------------------

    async def submit(self, calls=None, *, task: pb.Task | None = None, task_id: str | None = None,
                     timeout_ms: int = 0, wait: bool = True, resubmit_retryable: bool | None = None,
                     all_outputs: bool = False) -> TaskOutcome:
        """Place a task on a worker and (with ``wait``) return its terminal outcome,
        failing over as the module docstring says. Without ``wait``: the state
        SubmitTask returned on the worker that took it (no failover after that).
        The outcome holds its first page of outputs; with ``all_outputs`` every one
        (the other pages are fetched from the worker it ran on)."""
        out = await self._submit(calls, task, task_id, timeout_ms, wait, resubmit_retryable)
        if all_outputs and out.outputs_truncated:
            out = await (await self._session(out.worker)).complete(out)
        return out

    async def _submit(self, calls, task, task_id, timeout_ms, wait, resubmit_retryable) -> TaskOutcome:
        t = build_task(calls=calls, task=task, task_id=task_id, timeout_ms=timeout_ms)
        tid = t.task_id
        loop = asyncio.get_running_loop()
        rec = self._tasks.get(tid)
        if rec is not None:                              # one live copy, one outcome
            out = await asyncio.shield(rec.outcome)
            if wait and not out.is_terminal:             # the first submit did not wait: follow it
                async for upd in self.watch([tid]):
                    if upd.outcome is not None:
                        return upd.outcome
            return out
        rec = self._tasks[tid] = _Task(loop)
        retry_failed = self.resubmit_retryable if resubmit_retryable is None else resubmit_retryable
        try:
            outcome = await self._run(t, rec, wait, retry_failed)
        except BaseException as exc:
            if not rec.outcome.done():
                if isinstance(exc, asyncio.CancelledError):
                    rec.outcome.cancel()
                else:
                    rec.outcome.set_exception(exc)
                    rec.outcome.exception()          # retrieved: no "never retrieved" warning
            raise
        else:
            rec.outcome.set_result(outcome)
            return outcome
        finally:
            del self._tasks[tid]
            if rec.worker:
                where = self._where
                where.pop(tid, None)
                where[tid] = rec.worker
                if len(where) > WHERE_REMEMBERED:
                    del where[next(iter(where))]        # the oldest: a long-lived client stays bounded

    async def map(self, function_id: str, args_iterable: Iterable, *, concurrency: int = 64,
                  timeout_ms: int = 0) -> AsyncIterator[TaskOutcome]:
        """One one-call task per element, ``concurrency`` at once, over the whole fleet;
        yields outcomes as tasks finish."""
        run = lambda args: self.submit([(function_id, args)], timeout_ms=timeout_ms)  # noqa: E731
        async with contextlib.aclosing(as_completed_bounded(args_iterable, run, concurrency)) as outcomes:
            async for outcome in outcomes:
                yield outcome

    async def watch(self, task_ids: Iterable[str]) -> AsyncIterator[TaskUpdate]:
        """Each task's current state, then every change, until all are terminal. A task
        this client is failing over is followed to its new worker. NotFound if a task
        is unknown to every worker."""
        ids = list(dict.fromkeys(task_ids))
        queue: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        followers = [loop.create_task(self._follow(tid, queue)) for tid in ids]
        try:
            remaining = len(ids)
            while remaining:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                if item is None:
                    remaining -= 1
                    continue
                yield item
        finally:
            for f in followers:
                f.cancel()

    async def result(self, task_id: str, *, all_outputs: bool = False) -> TaskOutcome:
        """The task's current state (with its result once terminal: its first page of
        outputs, or with ``all_outputs`` every one), from the worker it is on."""
        addr = await self._locate(task_id)
        out = await (await self._session(addr)).result(task_id, all_outputs=all_outputs)
        rec = self._tasks.get(task_id)
        if rec is not None:
            out.attempts = max(1, rec.attempts)
        return out

    async def cancel(self, task_id: str, reason: str = "") -> TaskOutcome:
        """CancelTask on the worker that holds the task: it ends FAILED / CANCELLED
        (not retryable, so this client never resubmits it). NotFound if no
        registered worker knows it."""
        addr = await self._locate(task_id)
        return await (await self._session(addr)).cancel(task_id, reason)

    # ---- placing one task ---------------------------------------------------------------

    async def _run(self, t: pb.Task, rec: _Task, wait: bool, retry_failed: bool) -> TaskOutcome:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_for_worker_s
        refused: set[str] = set()         # refused this task since the last back-off
        failed_on: set[str] = set()       # ran it and failed it retryably: never again
        delay = 0.002
        last_err: Exception | None = None
        # An id this client already placed (e.g. submitted with wait=False) goes back to
        # the worker that has it, which answers idempotently: never a second copy.
        known = self._where.get(t.task_id)
        while True:
            if self._closed:
                raise Unavailable("the cluster client is closed")
            if known is not None:
                addr, known = known, None
            else:
                now = loop.time()
                info = self.placement.choose(self.view.workers.values(), now, refused | failed_on)
                if info is None:
                    if now >= deadline:
                        raise last_err or Unavailable(
                            f"no ready worker under {self.prefix!r} in etcd within {self.wait_for_worker_s:g} s "
                            f"({len(self.view.workers)} registered, etcd "
                            f"{'up' if self.view.connected else 'down: ' + (self.view.last_error or 'no answer')})")
                    if refused:
                        refused.clear()          # all refused: let slots free up, then try them all again
                        await asyncio.sleep(min(delay, max(0.0, deadline - now)))
                        delay = min(delay * 2, 0.05)
                    else:
                        try:                     # nobody placeable: wait for the registry to change
                            await asyncio.wait_for(self.view.changed.wait(),
                                                   min(0.25, max(0.001, deadline - now)))
                        except asyncio.TimeoutError:
                            pass
                    continue
                addr = info.addr
            try:
                client = await self._session(addr)
            except Unavailable as exc:
                last_err = exc
                continue                         # marked down by _session
            if addr != self._where.get(t.task_id):
                now_info = self.view.workers.get(addr)
                if now_info is None or not now_info.placeable:
                    continue                     # it left (or began draining) while the session opened
            self.placement.started(addr)
            self.placed[addr] = self.placed.get(addr, 0) + 1
            if self._on_placement is not None:
                self._on_placement(addr, t.task_id)
            rec.place(addr)
            try:
                outcome = await client.submit_built(t, wait=wait)
            except NoSlot as exc:
                self.refusals += 1
                refused.add(addr)
                last_err = exc
                continue
            except SessionBroken as exc:
                self._session_lost(addr, client)
                last_err = exc
                rec.attempts += 1
                if rec.attempts > self.max_resubmits:
                    raise SessionBroken(f"task {t.task_id}: {rec.attempts} worker(s) went away while it ran "
                                        f"(max_resubmits={self.max_resubmits}); last: {exc.message}",
                                        exc.code) from exc
                self.resubmits += 1
                continue
            except Unavailable as exc:           # a draining worker refused it: it never ran there
                self.refusals += 1
                refused.add(addr)
                self._mark_down(addr)
                last_err = exc
                continue
            finally:
                self.placement.finished(addr)
            outcome.attempts = rec.attempts + 1
            if (wait and retry_failed and outcome.state == "FAILED" and outcome.retryable
                    and rec.attempts < self.max_resubmits):
                rec.attempts += 1
                self.resubmits += 1
                failed_on.add(addr)
                self._where.pop(t.task_id, None)   # the rerun goes elsewhere, not back to its result
                last_err = None
                continue
            return outcome

    # ---- sessions ----------------------------------------------------------------------

    async def _session(self, addr: str) -> WorkerClient:
        """The session with ``addr``, opened on first use; Unavailable (and the worker
        marked down) if it cannot be opened."""
        c = self._sessions.get(addr)
        if c is not None and c.broken is None:
            return c
        if c is not None:
            self._session_lost(addr, c)
        fut = self._opening.get(addr)
        if fut is None:
            fut = self._opening[addr] = asyncio.get_running_loop().create_future()
            c = WorkerClient(addr, connect_timeout_s=self.connect_timeout_s, token=self._token)
            try:
                await c.connect()
            except Unavailable as exc:
                self._mark_down(addr)
                fut.set_exception(exc)
                fut.exception()
                raise
            finally:
                self._opening.pop(addr, None)
            self._sessions[addr] = c
            fut.set_result(c)
            return c
        return await asyncio.shield(fut)

    def _session_lost(self, addr: str, client: WorkerClient) -> None:
        if self._sessions.get(addr) is client:
            del self._sessions[addr]
            self._mark_down(addr)
            self._spawn(client.close())

    def _mark_down(self, addr: str) -> None:
        info = self.view.workers.get(addr)
        self.placement.mark_down(addr, info.revision if info else 0, asyncio.get_running_loop().time())

    def _worker_changed(self, addr: str, info: WorkerInfo | None) -> None:
        if info is not None:
            return
        self.placement.forget(addr)
        c = self._sessions.get(addr)
        if c is not None and c.broken is None and self.placement.inflight.get(addr, 0) > 0 and not self._closed:
            self._spawn(self._probe(addr, c))

    async def _probe(self, addr: str, client: WorkerClient) -> None:
        """The key of a worker with tasks of ours vanished: drained (it still answers,
        its tasks finish there) or dead / cut off (no answer: close the session, which
        resubmits its tasks elsewhere)."""
        try:
            await asyncio.wait_for(client.result("blockx-cluster-probe"), self.probe_timeout_s)
        except (NotFound, Unavailable):
            return                               # it answered (NotFound), or the session broke already
        except asyncio.TimeoutError:
            log.warning("cluster: worker %s left the registry and does not answer within %g s; "
                        "resubmitting its tasks elsewhere", addr, self.probe_timeout_s)
            self._session_lost(addr, client)
        except Exception:  # noqa: BLE001 - any other answer means it is alive
            return

    def _spawn(self, coro) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._background.add(t)
        t.add_done_callback(self._background.discard)

    # ---- watch / result helpers -----------------------------------------------------------

    async def _locate(self, task_id: str) -> str:
        rec = self._tasks.get(task_id)
        if rec is not None and rec.worker:
            return rec.worker
        addr = self._where.get(task_id)
        if addr is not None:
            return addr
        for addr in list(self.view.workers):
            try:
                await (await self._session(addr)).result(task_id)
            except (NotFound, Unavailable):
                continue
            self._where[task_id] = addr
            return addr
        raise NotFound(f"task {task_id!r} is unknown to every registered worker")

    async def _follow(self, tid: str, queue: asyncio.Queue) -> None:
        last_state = None
        try:
            while True:
                rec = self._tasks.get(tid)
                moved = rec.watch_moves() if rec is not None else None
                addr = await self._locate(tid)
                try:
                    async for upd in (await self._session(addr)).watch([tid]):
                        if upd.state != last_state:
                            last_state = upd.state
                            if upd.outcome is not None and rec is not None:
                                upd.outcome.attempts = rec.attempts + 1
                            queue.put_nowait(upd)
                    queue.put_nowait(None)
                    return
                except SessionBroken:
                    if moved is None:
                        raise
                    await moved.wait()           # this client is resubmitting it: follow it there
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - handed to the watch iterator
            queue.put_nowait(exc)
