"""ClientPool: one WorkerClient (one channel and TaskSession) per (token, worker),
shared by every browser session of that token, made on first use.

The dashboard calls each worker with the token of the person asking (the worker
enforces who owns which task), so a pool entry is keyed by the token and is used
for that token's requests only. Entries unused for ``idle_s`` are closed by
``sweep`` (and every entry of a token no live session holds), except those a
live view holds (``hold``: a task page's progress watch may run for as long as
the task does, with no other request); a broken session is replaced on next use;
at ``capacity`` the least recently used entry is closed."""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable

from blockx.client import WorkerClient
from blockx.tls.client_tls import ClientTLS

DEFAULT_CAPACITY = 256
DEFAULT_IDLE_S = 120.0
CONNECT_TIMEOUT_S = 3.0


def _key(token: str, addr: str) -> tuple[bytes, str]:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest(), addr


class ClientPool:
    def __init__(self, tls: ClientTLS | None, *, clock: Callable[[], float], capacity: int = DEFAULT_CAPACITY,
                 idle_s: float = DEFAULT_IDLE_S, connect_timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        self.tls = tls
        self.capacity = capacity
        self.idle_s = idle_s
        self.connect_timeout_s = connect_timeout_s
        self._clock = clock
        self._entries: OrderedDict[tuple[bytes, str], tuple[WorkerClient, float]] = OrderedDict()
        self._connecting: dict[tuple[bytes, str], asyncio.Future] = {}
        self._held: dict[tuple[bytes, str], int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, token: str, addr: str) -> WorkerClient:
        """A connected client of ``addr`` speaking as ``token``; raises the client's
        BlockxError (Unauthenticated, Unavailable...) when it cannot be made."""
        key = _key(token, addr)
        entry = self._entries.get(key)
        if entry is not None and entry[0].broken is None:
            self._entries[key] = (entry[0], self._clock())
            self._entries.move_to_end(key)
            return entry[0]
        if entry is not None:
            del self._entries[key]
            await entry[0].close()
        pending = self._connecting.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._connecting[key] = fut
        try:
            c = WorkerClient(addr, connect_timeout_s=self.connect_timeout_s, fail_fast=True, tls=self.tls,
                             token=token)
            await c.connect()
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()              # retrieved: a waiter may not exist
            raise
        finally:
            self._connecting.pop(key, None)
        fut.set_result(c)
        for k in [k for k in self._entries if not self._held.get(k)][:max(0, len(self._entries) - self.capacity + 1)]:
            old, _t = self._entries.pop(k)
            await old.close()
        self._entries[key] = (c, self._clock())
        return c

    @contextlib.asynccontextmanager
    async def hold(self, token: str, addr: str) -> AsyncIterator[WorkerClient]:
        """``get``, and keep the entry out of the idle sweep until the block ends."""
        key = _key(token, addr)
        c = await self.get(token, addr)
        self._held[key] = self._held.get(key, 0) + 1
        try:
            yield c
        finally:
            self._held[key] -= 1
            if not self._held[key]:
                del self._held[key]
                if key in self._entries:
                    self._entries[key] = (self._entries[key][0], self._clock())

    async def sweep(self, live_tokens: set[str]) -> int:
        """Close the idle entries and those of tokens no session holds (a held entry
        of a live token stays); how many closed."""
        live = {hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest() for t in live_tokens}
        now = self._clock()
        dead = [k for k, (_c, t) in self._entries.items()
                if k[0] not in live or (now - t > self.idle_s and not self._held.get(k))]
        for k in dead:
            c, _t = self._entries.pop(k)
            await c.close()
        return len(dead)

    async def close(self) -> None:
        entries, self._entries = list(self._entries.values()), OrderedDict()
        for c, _t in entries:
            await c.close()
