"""EtcdPublisher: registers the Worker in etcd and publishes its heartbeat.

Theory of operation. The key is `key_prefix + worker_addr`; its value is the
heartbeat JSON, attached to a lease (TTL `lease_ttl_s`, 10 s by default), so a
Worker that dies silently disappears from the registry when the lease expires.
One background task on the Worker's event loop runs the whole protocol:

    registering: grant lease -> put key (heartbeat JSON, lease attached)
    registered:  every interval: refresh lease -> put fresh heartbeat
                 a refresh answering TTL <= 0, or a put answering "lease not
                 found", means the lease is gone (revoked, expired during an
                 outage): register again at once with a new lease
    retrying:    any etcd error: log it (one WARNING per outage, then one INFO
                 line a minute with the count: blockx.adapters.outage_log),
                 drop the connection, wait an exponential, jittered backoff,
                 then carry on; the lease is kept, so after a short outage a
                 refresh simply revives it (INFO etcd_recovered)

etcd is never allowed to stall the Worker: every RPC carries a gRPC deadline and
is additionally bounded by asyncio.wait_for, `deregister()` and `stop()` have a
total time bound, and no exception leaves the background task. etcd being down
at startup is not an error either: the Worker serves, the publisher keeps trying.

`ETCD_ENDPOINTS=none` (or empty) gives a disabled publisher whose methods do
nothing, so the caller never needs an if.

Heartbeat JSON (the Coordinator reads it; `heartbeat_fn` returns the dict, the
Worker derives most of it from WorkerCore.derive_heartbeat):

    workerAddr      str   advertised host:port (the key suffix); filled in if absent
    deployment      str   "block" | "bundle" (observability label)
    version         str   Worker version
    taskSlots       int   slot pool size
    freeSlots       int   slots FREE now (taskSlots - reservedSlots - runningTasks)
    reservedSlots   int   slots ALLOCATED (reserved by RequestTaskSlot, not running)
    runningTasks    int   slots RUNNING
    executorsHealthy int  healthy executor processes
    executorsTotal  int   configured executor processes
    draining        bool  shutting down; do not send new tasks
    ready           bool  at least one healthy executor and not draining
    startedAtMs     int   Worker start, Unix ms
    updatedAtMs     int   when this value was written, Unix ms; set by the publisher if absent
    seq             int   publish sequence number, +1 per write; set by the publisher if absent
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from blockx.adapters.outage_log import REMIND, WARN, OutageLog
from blockx.etcd.connection import EtcdConnection, describe_etcd_error
from blockx.etcd.endpoints import parse_endpoints

__all__ = ["EtcdPublisher", "HEARTBEAT_FIELDS", "PublisherState", "parse_endpoints"]

HEARTBEAT_FIELDS = (
    "workerAddr", "deployment", "version", "taskSlots", "freeSlots", "reservedSlots",
    "runningTasks", "executorsHealthy", "executorsTotal", "draining", "ready",
    "startedAtMs", "updatedAtMs", "seq",
)
# Also in the Worker's heartbeat (blockx.app.run): metricsAddr (host:port of /metrics, "" when
# metricsListen is off), tls (off|on|mutual), authMode, etcdSecurity (plaintext|tls|mtls[,user=U]).


class PublisherState:
    IDLE = "idle"                  # constructed, start() not called yet
    DISABLED = "disabled"          # no endpoints configured: does nothing
    REGISTERING = "registering"    # started, no lease yet / re-registering after a lost lease
    REGISTERED = "registered"      # key present, heartbeats flowing
    RETRYING = "retrying"          # last etcd operation failed; backing off
    DEREGISTERED = "deregistered"  # stopped (deregister() or stop())


class _LeaseLost(Exception):
    pass


class EtcdPublisher:
    def __init__(
        self,
        endpoints: EtcdConnection | str | Iterable[str] | None,
        key_prefix: str,
        worker_addr: str,
        heartbeat_fn: Callable[[], dict],
        *,
        interval_ms: int = 200,
        lease_ttl_s: int = 10,
        logger: logging.Logger | None = None,
        metrics: Any = None,
        backoff_initial_ms: int = 200,
        backoff_max_ms: int = 5000,
        call_timeout_ms: int | None = None,
        deregister_timeout_ms: int = 2000,
        error_log_interval_s: float = 60.0,
        rand: Callable[[], float] = random.random,
        tls: Any = None,
    ) -> None:
        # The Worker hands an EtcdConnection (TLS and the etcd user with it); bare
        # endpoints with an optional ClientTLS are the same thing spelt out.
        self.connection = (endpoints if isinstance(endpoints, EtcdConnection)
                           else EtcdConnection(tuple(parse_endpoints(endpoints)), tls))
        self._endpoints = list(self.connection.endpoints)
        if interval_ms <= 0:
            raise ValueError(f"heartbeat interval must be > 0 ms, got {interval_ms}")
        if lease_ttl_s < 1:
            raise ValueError(f"lease TTL must be >= 1 s, got {lease_ttl_s}")
        if backoff_initial_ms <= 0 or backoff_max_ms < backoff_initial_ms:
            raise ValueError(f"bad backoff {backoff_initial_ms}..{backoff_max_ms} ms")
        if self._endpoints and not worker_addr:
            raise ValueError("worker_addr is empty: it is the etcd key suffix")
        self.key_prefix = key_prefix
        self.worker_addr = worker_addr
        self.key = (key_prefix + worker_addr).encode()
        self._heartbeat_fn = heartbeat_fn
        self._interval_s = interval_ms / 1000.0
        self._ttl_s = int(lease_ttl_s)
        # A call must finish well inside the lease TTL, or one slow refresh could
        # let the lease lapse while we wait on it.
        default_call_ms = min(2000, max(100, lease_ttl_s * 1000 // 4))
        self._call_timeout_s = (call_timeout_ms or default_call_ms) / 1000.0
        self._dereg_timeout_s = deregister_timeout_ms / 1000.0
        self._backoff_initial_s = backoff_initial_ms / 1000.0
        self._backoff_max_s = backoff_max_ms / 1000.0
        self._log = logger or logging.getLogger("blockx.etcd")
        self._metrics = metrics
        self._rand = rand
        self._outage = OutageLog(error_log_interval_s)

        self._client: Any = None
        self._endpoint_idx = 0
        self._lease_id: int | None = None
        self._task: asyncio.Task | None = None
        self._ended = False             # deregister() / stop() ran: start() is refused from then on
        self._wake = asyncio.Event()
        self._seq = 0
        self._failures = 0              # consecutive failed cycles (drives backoff)
        self._state = PublisherState.IDLE
        self.last_error: str | None = None
        self._last_good: dict = {}
        self._hb_error_logged = False
        self._set_state(PublisherState.DISABLED if not self._endpoints else PublisherState.IDLE)

    # ---- public surface ------------------------------------------------------
    @property
    def enabled(self) -> bool:
        return bool(self._endpoints)

    @property
    def state(self) -> str:
        return self._state

    @property
    def lease_id(self) -> int | None:
        return self._lease_id

    @property
    def endpoints(self) -> list[str]:
        return [f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self._endpoints]

    async def start(self) -> None:
        """Begin registering in the background; returns at once. After
        `deregister()` or `stop()` it does nothing: a worker that is draining
        (the signal came while its ready path awaited) never registers again."""
        if not self.enabled or self._task is not None:
            return
        if self._ended:
            self._log_event(logging.WARNING, "etcd_start_refused", state=self._state,
                            reason="the publisher was stopped or deregistered (the worker is shutting down)")
            return
        self._set_state(PublisherState.REGISTERING)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="etcd-publisher")

    def publish_now(self) -> None:
        """Publish at once instead of at the next tick (e.g. draining or ready flipped)."""
        self._wake.set()

    async def deregister(self) -> None:
        """Stop heartbeats, delete the key and revoke the lease; bounded, never raises."""
        if not self.enabled:
            return
        self._ended = True
        await self._halt()
        lease_id, self._lease_id = self._lease_id, None
        if lease_id is not None:
            try:
                await asyncio.wait_for(self._remove(lease_id), self._dereg_timeout_s)
                self._log_event(logging.INFO, "etcd_deregistered", lease_id=lease_id)
            except Exception as exc:  # noqa: BLE001 - shutdown goes on; the lease expires by itself
                self._count_error()
                self._log_event(logging.WARNING, "etcd_deregister_failed", lease_id=lease_id,
                                error=_describe(exc), note=f"key expires with the lease within {self._ttl_s}s")
        await self._close_client()
        self._set_state(PublisherState.DEREGISTERED)

    async def stop(self) -> None:
        """Stop heartbeats and close the connection, without deleting the key.

        After a plain stop the key lives until the lease expires; call
        `deregister()` first for a clean exit. Idempotent, bounded, never raises.
        """
        if not self.enabled:
            return
        self._ended = True
        await self._halt()
        await self._close_client()
        if self._state != PublisherState.DEREGISTERED:
            self._set_state(PublisherState.DEREGISTERED)

    # ---- the loop ------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            try:
                if self._lease_id is None:
                    await self._register()
                else:
                    await self._beat()
                self._on_success()
                await self._sleep(self._interval_s)
            except asyncio.CancelledError:
                raise
            except _LeaseLost as lost:
                self._lease_id = None
                self._set_state(PublisherState.REGISTERING)
                self._log_event(logging.WARNING, "etcd_lease_lost", reason=str(lost))
                # Re-register at once: the key is already gone from the registry.
            except Exception as exc:  # noqa: BLE001 - etcd trouble must never escape
                await self._on_failure(exc)

    async def _register(self) -> None:
        self._set_state(PublisherState.REGISTERING)
        client = self._ensure_client()
        lease = await self._call(client.lease(self._ttl_s))
        self._lease_id = lease.id
        try:
            await self._call(client.put(self.key, self._encode_heartbeat(), lease=lease.id))
        except Exception:
            # The lease without its key is useless; do not leak it for TTL seconds.
            self._lease_id = None
            await self._quiet(client.revoke_lease(lease.id))
            raise
        self._count("etcd_registrations")
        self._count("etcd_publishes")
        self._log_event(logging.INFO, "etcd_registered", key=self.key.decode(),
                        lease_id=lease.id, ttl_s=lease.ttl, endpoint=self._current_endpoint())

    async def _beat(self) -> None:
        client = self._ensure_client()
        reply = await self._call(client.refresh_lease(self._lease_id))
        if reply is None or reply.TTL <= 0:
            raise _LeaseLost(f"lease {self._lease_id} refresh returned TTL {getattr(reply, 'TTL', None)}")
        try:
            await self._call(client.put(self.key, self._encode_heartbeat(), lease=self._lease_id))
        except Exception as exc:
            if "lease not found" in str(exc):
                raise _LeaseLost(f"lease {self._lease_id} gone: {exc}") from exc
            raise
        self._count("etcd_publishes")

    async def _remove(self, lease_id: int) -> None:
        client = self._ensure_client()
        await self._call(client.delete(self.key))
        try:
            await self._call(client.revoke_lease(lease_id))
        except Exception as exc:
            if "lease not found" not in str(exc):
                raise

    # ---- success / failure bookkeeping ---------------------------------------
    def _on_success(self) -> None:
        if self._failures:
            down_s = time.monotonic() - self._outage.since
            self._log_event(logging.INFO, "etcd_recovered", failures=self._outage.recovered(),
                            down_s=round(down_s, 1), endpoint=self._current_endpoint())
            self._failures = 0
            self.last_error = None
        self._set_state(PublisherState.REGISTERED)

    async def _on_failure(self, exc: BaseException) -> None:
        self._failures += 1
        self.last_error = describe_etcd_error(exc, self.connection)
        self._count_error()
        self._set_state(PublisherState.RETRYING)
        delay = self._backoff(self._failures)
        now = time.monotonic()
        quiet = self._outage.quiet
        verdict = self._outage.failed(now)
        if verdict == WARN:
            self._log_event(logging.WARNING, "etcd_unavailable", error=self.last_error,
                            endpoint=self._current_endpoint(), retry_in_ms=int(delay * 1000),
                            lease_id=self._lease_id,
                            note=f"retrying; a line every {self._outage.interval_s:g} s while it lasts")
        elif verdict == REMIND:
            self._log_event(logging.INFO, "etcd_still_unavailable", error=self.last_error,
                            endpoint=self._current_endpoint(), failures=self._outage.failures,
                            unlogged_failures=quiet, down_s=round(now - self._outage.since, 1),
                            lease_id=self._lease_id)
        # A fresh channel next time, on the next endpoint: gRPC's own reconnect
        # backoff grows to minutes, and another member may be up.
        await self._close_client()
        if len(self._endpoints) > 1:
            self._endpoint_idx = (self._endpoint_idx + 1) % len(self._endpoints)
        # Not wakeable by publish_now(): the backoff is what protects etcd.
        await asyncio.sleep(delay)

    def _backoff(self, failures: int) -> float:
        base = min(self._backoff_max_s, self._backoff_initial_s * (2 ** min(failures - 1, 30)))
        # +-20% jitter so a fleet restarted together does not hammer etcd in step.
        return base * (0.8 + 0.4 * self._rand())

    # ---- helpers ---------------------------------------------------------------
    def _encode_heartbeat(self) -> bytes:
        try:
            hb = dict(self._heartbeat_fn())
            self._last_good = hb
            self._hb_error_logged = False
        except Exception as exc:  # noqa: BLE001 - a bug in the source must not unregister us
            # Keep the lease and re-publish the last good view (fresh seq and
            # updatedAtMs) rather than a value the Coordinator cannot parse.
            if not self._hb_error_logged:
                self._log_event(logging.ERROR, "heartbeat_fn_failed", error=_describe(exc))
                self._hb_error_logged = True
            hb = {k: v for k, v in self._last_good.items() if k not in ("updatedAtMs", "seq")}
        self._seq += 1
        hb.setdefault("workerAddr", self.worker_addr)
        hb.setdefault("updatedAtMs", int(time.time() * 1000))
        hb.setdefault("seq", self._seq)
        return orjson.dumps(hb, default=str, option=orjson.OPT_NON_STR_KEYS)

    def _ensure_client(self) -> Any:
        if self._client is None:
            # imported lazily: a disabled publisher never loads the gRPC stubs
            self._client = self.connection.client(
                self._endpoint_idx, timeout=self._call_timeout_s,
                options={
                    "grpc.initial_reconnect_backoff_ms": int(self._backoff_initial_s * 1000),
                    "grpc.min_reconnect_backoff_ms": int(self._backoff_initial_s * 1000),
                    "grpc.max_reconnect_backoff_ms": int(self._backoff_max_s * 1000),
                    "grpc.enable_http_proxy": 0,
                },
            )
        return self._client

    async def _call(self, coro: Any) -> Any:
        # The gRPC deadline should fire first; wait_for is the backstop for any
        # client path that waits without one.
        return await asyncio.wait_for(coro, self._call_timeout_s + 0.5)

    async def _quiet(self, coro: Any) -> None:
        try:
            await self._call(coro)
        except Exception:  # noqa: BLE001 - best effort clean-up
            pass

    async def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await asyncio.wait_for(client.close(), 1.0)
            except Exception:  # noqa: BLE001 - the channel is abandoned either way
                pass

    async def _halt(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(task), self._call_timeout_s + 1.0)
        except (asyncio.CancelledError, asyncio.TimeoutError):
            pass
        except Exception as exc:  # noqa: BLE001 - the loop never raises; belt and braces
            self._log_event(logging.ERROR, "etcd_publisher_crashed", error=_describe(exc))

    async def _sleep(self, seconds: float) -> None:
        # Cleared after waking, so a publish_now() during an RPC is not lost.
        try:
            await asyncio.wait_for(self._wake.wait(), seconds)
        except asyncio.TimeoutError:
            pass
        self._wake.clear()

    def _current_endpoint(self) -> str:
        return self.endpoints[self._endpoint_idx]

    def _set_state(self, state: str) -> None:
        self._state = state
        if self._metrics is not None:
            self._metrics.set_etcd_state(state)

    def _count(self, attr: str) -> None:
        if self._metrics is not None:
            setattr(self._metrics, attr, getattr(self._metrics, attr, 0) + 1)

    def _count_error(self) -> None:
        self._count("etcd_errors")

    def _log_event(self, level: int, event: str, **fields: Any) -> None:
        if self._log.isEnabledFor(level):
            fields.setdefault("key", self.key.decode(errors="replace"))
            self._log.log(level, event, extra={"event": event, "fields": fields})


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, asyncio.TimeoutError):
        text = "timed out"
    return f"{type(exc).__name__}: {text}"
