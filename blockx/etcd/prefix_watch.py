"""PrefixWatch: one etcd key prefix kept in sync in memory (a range read, then a watch).

Theory of operation. One background task: range-read the prefix (the complete
state at revision R, handed to ``on_reset``), then watch the prefix from R + 1;
every revision's changes arrive together (a transaction's puts are one revision)
and go to ``on_events(revision, [(is_put, key, value), ...])``. There is no
polling loop: after the first read only the watch stream carries news.

When etcd goes away the stream breaks: the owner keeps its last view (nothing is
cleared), the outage is logged once, and the task retries with a jittered
exponential backoff, rotating over the endpoints; on reconnection it reads the
prefix again (``on_reset``), so whatever changed meanwhile (keys gone with their
leases, new workers) is seen. A compacted start revision is handled the same way.

The watcher talks to etcd's KV and Watch services directly over grpc.aio (the
stubs aetcd ships): the aetcd watch iterator hands out single events and loses
the revision grouping a transaction needs.
"""
from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable
from typing import Any

import grpc

from blockx.etcd.connection import EtcdConnection, describe_etcd_error
from blockx.etcd.endpoints import etcd_target
from blockx.follower import Follower

__all__ = ["PrefixWatch", "etcd_target", "prefix_range_end"]

ResetFn = Callable[[int, dict[bytes, tuple[bytes, int]]], None]
EventsFn = Callable[[int, list[tuple[bool, bytes, bytes]]], None]

_CHANNEL_OPTIONS = (
    ("grpc.keepalive_time_ms", 5_000),
    ("grpc.keepalive_timeout_ms", 3_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.enable_http_proxy", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
)


def prefix_range_end(prefix: bytes) -> bytes:
    """The range_end that selects every key starting with ``prefix``."""
    s = bytearray(prefix)
    for i in reversed(range(len(s))):
        if s[i] < 0xFF:
            s[i] += 1
            return bytes(s[: i + 1])
    return b"\x00"


class PrefixWatch:
    def __init__(self, endpoints: EtcdConnection | str | Iterable[str], prefix: str | bytes, on_reset: ResetFn,
                 on_events: EventsFn, *, name: str = "etcd-watch", logger: logging.Logger | None = None,
                 call_timeout_s: float = 2.0, backoff_initial_s: float = 0.1, backoff_max_s: float = 2.0,
                 rand: Callable[[], float] = random.random) -> None:
        # endpoints alone: TLS and the etcd user from the environment (EtcdConnection.from_env)
        self.connection = EtcdConnection.of(endpoints)
        self._endpoints = list(self.connection.endpoints)
        if not self._endpoints:
            raise ValueError("PrefixWatch needs at least one etcd endpoint")
        self.prefix = prefix.encode() if isinstance(prefix, str) else bytes(prefix)
        self._range_end = prefix_range_end(self.prefix)
        self._on_reset = on_reset
        self._on_events = on_events
        self._name = name
        self._log = logger or logging.getLogger("blockx.etcd")
        self._call_timeout_s = call_timeout_s
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._rand = rand
        self._idx = 0
        self._follower = Follower(self._run, name)
        self.connected = False
        self.revision = 0              # the last revision applied
        self.outages = 0               # how many times the connection was lost
        self.last_error: str | None = None

    @property
    def endpoints(self) -> list[str]:
        return [etcd_target(e) for e in self._endpoints]

    async def start(self, wait_s: float = 0.0) -> bool:
        """Start the background task; wait up to ``wait_s`` for the first read.
        Returns whether the prefix has been read (False: etcd unreachable so far)."""
        return await self._follower.start(wait_s)

    async def stop(self) -> None:
        await self._follower.stop()
        self.connected = False

    async def _run(self) -> None:
        from aetcd import rpc

        failures = 0
        while True:
            target = etcd_target(self._endpoints[self._idx])
            channel = self.connection.channel(self._endpoints[self._idx], _CHANNEL_OPTIONS)
            call = None
            try:
                md = await self.connection.metadata(channel, self._call_timeout_s)
                kv = rpc.KVStub(channel)
                resp = await kv.Range(rpc.RangeRequest(key=self.prefix, range_end=self._range_end),
                                      timeout=self._call_timeout_s, metadata=md)
                rev = resp.header.revision
                self._on_reset(rev, {k.key: (k.value, k.mod_revision) for k in resp.kvs})
                self.revision = rev
                self._follower.loaded()
                if not self.connected:
                    self.connected = True
                    if failures:
                        self._log.info("%s: etcd at %s is back; read %d key(s) under %r at revision %d",
                                       self._name, target, len(resp.kvs), self.prefix.decode(errors="replace"),
                                       rev)
                failures = 0
                call = rpc.WatchStub(channel).Watch(metadata=md)
                await call.write(rpc.WatchRequest(create_request=rpc.WatchCreateRequest(
                    key=self.prefix, range_end=self._range_end, start_revision=rev + 1)))
                while True:
                    r = await call.read()
                    if r is grpc.aio.EOF:
                        raise ConnectionError("the watch stream ended")
                    if r.compact_revision:
                        raise ConnectionError(f"watch start revision compacted (at {r.compact_revision})")
                    if r.canceled:
                        raise ConnectionError(f"watch canceled by etcd: {r.cancel_reason or 'no reason'}")
                    if r.events:
                        self._deliver(r.events)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - etcd trouble: keep the last view, retry
                failures += 1
                self.last_error = describe_etcd_error(exc, self.connection)
                if self.connected or failures == 1:
                    self.outages += 1
                    self._log.warning("%s: etcd at %s unavailable (%s); keeping the last known view",
                                      self._name, target, self.last_error)
                self.connected = False
                if len(self._endpoints) > 1:
                    self._idx = (self._idx + 1) % len(self._endpoints)
                delay = min(self._backoff_max_s, self._backoff_initial_s * 2 ** min(failures - 1, 20))
                await asyncio.sleep(delay * (0.8 + 0.4 * self._rand()))
            finally:
                if call is not None:
                    call.cancel()
                await channel.close()

    def _deliver(self, events: Any) -> None:
        group: list[tuple[bool, bytes, bytes]] = []
        rev = 0
        for ev in events:
            r = ev.kv.mod_revision
            if group and r != rev:
                self._on_events(rev, group)
                group = []
            rev = r
            group.append((ev.type == 0, ev.kv.key, ev.kv.value))     # 0 = PUT, 1 = DELETE
        if group:
            self._on_events(rev, group)
            self.revision = rev

