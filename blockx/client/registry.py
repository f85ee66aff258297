"""The registry view: the Workers registered under an etcd prefix, as their heartbeats say.

Each Worker keeps ``prefix + workerAddr`` = heartbeat JSON (docs/fleet.md, "etcd registration") alive with
a lease. ``RegistryView`` reads the prefix once and then follows it with an etcd
watch (blockx.etcd.prefix_watch.PrefixWatch): a put updates a worker, a delete
(deregistration, or its lease expiring) removes it. While etcd is unreachable the
view keeps what it last knew and says so once in the log; when etcd returns the
prefix is read again, so workers that came or went meanwhile are seen.

``changed`` is an asyncio.Event set on every change, for callers waiting for a
worker to appear; ``revision`` is the etcd revision of each worker's last value
(a Cluster uses it to tell a fresh heartbeat from the one it saw before a failure).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import json

from blockx.etcd.connection import EtcdConnection
from blockx.etcd.prefix_watch import PrefixWatch

DEFAULT_PREFIX = "/blockx/workers/"
log = logging.getLogger("blockx.client.cluster")


@dataclass(slots=True)
class WorkerInfo:
    """One registered Worker, from its heartbeat."""
    addr: str
    ready: bool = False
    draining: bool = False
    free_slots: int = 0
    task_slots: int = 0
    executors_healthy: int = 0
    executors_total: int = 0
    updated_at_ms: int = 0
    revision: int = 0                       # etcd mod_revision of this value
    seen_at: float = 0.0                    # monotonic time the view read it
    heartbeat: dict = field(default_factory=dict, repr=False)

    @property
    def placeable(self) -> bool:
        return self.ready and not self.draining

    def heartbeat_age_ms(self, now_ms: int | None = None) -> int:
        if not self.updated_at_ms:
            return -1
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        return max(0, now_ms - self.updated_at_ms)

    @classmethod
    def parse(cls, key_suffix: str, value: bytes, revision: int, seen_at: float) -> "WorkerInfo":
        """A heartbeat value -> WorkerInfo. A value that is not a JSON object gives a
        worker that is not ready (it is listed but never placed on)."""
        try:
            hb = json.loads(value)
        except ValueError:
            hb = None
        if not isinstance(hb, dict):
            return cls(key_suffix, revision=revision, seen_at=seen_at)

        def num(k: str) -> int:
            v = hb.get(k)
            return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0

        # The key suffix is the address to dial; workerAddr repeats it.
        return cls(key_suffix, ready=hb.get("ready") is True, draining=hb.get("draining") is True,
                   free_slots=num("freeSlots"), task_slots=num("taskSlots"),
                   executors_healthy=num("executorsHealthy"), executors_total=num("executorsTotal"),
                   updated_at_ms=num("updatedAtMs"), revision=revision, seen_at=seen_at, heartbeat=hb)


class RegistryView:
    """``async with RegistryView(endpoints) as view: view.workers`` -> {addr: WorkerInfo}."""

    def __init__(self, etcd_endpoints: EtcdConnection | str | Iterable[str], prefix: str = DEFAULT_PREFIX, *,
                 on_change: Callable[[str, WorkerInfo | None], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.prefix = prefix
        self.workers: dict[str, WorkerInfo] = {}
        self.changed = asyncio.Event()
        self._on_change = on_change
        self._clock = clock
        self._watch = PrefixWatch(etcd_endpoints, prefix, self._reset, self._events, name="registry-view",
                                  logger=log)

    @property
    def connected(self) -> bool:
        return self._watch.connected

    @property
    def outages(self) -> int:
        return self._watch.outages

    @property
    def last_error(self) -> str | None:
        """Why etcd last failed, naming the setting that fixes it (TLS, etcd user)."""
        return self._watch.last_error

    @property
    def revision(self) -> int:
        return self._watch.revision

    async def start(self, wait_s: float = 5.0) -> bool:
        """Start following the registry; True once it has been read (False: etcd is
        unreachable so far, the view fills in when it answers)."""
        return await self._watch.start(wait_s)

    async def stop(self) -> None:
        await self._watch.stop()

    async def __aenter__(self) -> "RegistryView":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    def placeable(self) -> list[WorkerInfo]:
        return [w for w in self.workers.values() if w.placeable]

    # ---- PrefixWatch callbacks -------------------------------------------------------

    def _key_suffix(self, key: bytes) -> str:
        return key[len(self.prefix.encode()):].decode(errors="replace")

    def _reset(self, _revision: int, kvs: dict[bytes, tuple[bytes, int]]) -> None:
        now = self._clock()
        fresh: dict[str, WorkerInfo] = {}
        for key, (value, mod_rev) in kvs.items():
            suffix = self._key_suffix(key)
            fresh[suffix] = WorkerInfo.parse(suffix, value, mod_rev, now)
        gone = [k for k in self.workers if k not in fresh]
        self.workers = fresh
        self._notify(gone, list(fresh))

    def _events(self, revision: int, events: list[tuple[bool, bytes, bytes]]) -> None:
        now = self._clock()
        gone, updated = [], []
        for is_put, key, value in events:
            suffix = self._key_suffix(key)
            if is_put:
                self.workers[suffix] = WorkerInfo.parse(suffix, value, revision, now)
                updated.append(suffix)
            elif self.workers.pop(suffix, None) is not None:
                gone.append(suffix)
        self._notify(gone, updated)

    def _notify(self, gone: list[str], updated: list[str]) -> None:
        if self._on_change is not None:
            for k in gone:
                self._on_change(k, None)
            for k in updated:
                self._on_change(k, self.workers.get(k))
        self.changed.set()
        self.changed = asyncio.Event()
