"""Function Code View, Redis source (FUNCTIONS_SOURCE=redis).

Layout under the prefix P (functionsRedisPrefix, default "blockx:functions:"):
- ``P + "sources"``: a hash, function id -> the function's Python source;
- ``P + "epoch"``: an integer, INCR'd in the same MULTI/EXEC as every write of the hash;
- ``P + "changed"``: a pub/sub channel; a push PUBLISHes on it inside that same
  transaction, so a subscriber hears of a push only once all of it is written.

Theory of operation (the directory and etcd sources' rules, with Redis as the store):
- A snapshot maps every function id to the sha256 hex digest of its source. The
  epoch is the Redis epoch of the last change that altered the code. Every read
  is one MULTI/EXEC (GET epoch, HGETALL sources), and every push writes the hash
  and bumps the epoch in one MULTI/EXEC, so a reader never sees half a push nor
  an epoch without its sources. A push that keeps every digest (the same
  directory pushed again) keeps the Worker's epoch.
- Following: one connection SUBSCRIBEs to the push channel and to the epoch
  key's keyspace-notification channel (which carries news only when the server
  has ``notify-keyspace-events`` on); a message triggers a reread. As a backstop
  the epoch key is read every ``check_interval_ms`` and the sources reread when it
  moved (a write by hand without PUBLISH, a message lost on a broken connection).
- A task pins the current epoch at activation and resolves every call against
  that snapshot; retention is the other sources' (function_snapshots.py).
- Redis down, at start or later: the last snapshot stays current, one log line
  says so, the follower reconnects with a jittered exponential backoff and
  rereads on reconnection. Before the first read the view is epoch 0, empty:
  calls fail FUNCTION_NOT_FOUND naming Redis.
- No epoch key (nothing pushed yet, or a Redis restarted without persistence):
  the last snapshot stays current (logged once), as the directory source keeps
  its last snapshot when the directory disappears. A push after a wipe restarts
  the Redis epoch at 1; epochs only grow, so that snapshot takes epoch + 1.
- A value that is not UTF-8, is larger than ``max_source_bytes``, or whose field
  is not a valid function id is left out (logged), as the other sources do.

``apply_snapshot`` is the synchronous state change (tested without Redis);
``start`` / ``stop`` run the follower that feeds it on the Worker's loop.
``read_sources`` / ``push_sources`` are the two transactions, shared with
``blockx functions list|push --redis``.
"""
from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

from blockx.log_event import log_event
from blockx.follower import Follower
from blockx.plugins.function_code.etcd import valid_function_id
from blockx.plugins.function_code.view import DEFAULT_MAX_SOURCE_BYTES
from blockx.plugins.function_code.keyed import KeyedCodeSource
from blockx.plugins.function_code.redis_store import (  # noqa: F401  (the store's names, used here and by callers)
    DEFAULT_CHECK_INTERVAL_MS, DEFAULT_REDIS_PREFIX, DEFAULT_REDIS_URL, PUSH_WATCH_RETRIES, RedisCodeError,
    RedisCodeKeys, parse_epoch, push_sources, read_sources, redacted_url, redis_client,
)

logger = logging.getLogger("blockx.plugins.function_code")


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class FunctionCodeRedis(KeyedCodeSource):
    """The Redis-backed Function Code View provider and epoch resolver."""

    def __init__(self, url: str, prefix: str, snapshot_retention_ms: int, *, now_ms: int = 0,
                 check_interval_ms: int = DEFAULT_CHECK_INTERVAL_MS,
                 max_source_bytes: int = DEFAULT_MAX_SOURCE_BYTES, clock_ms: Callable[[], int] = _wall_ms,
                 call_timeout_s: float = 2.0, backoff_initial_s: float = 0.1, backoff_max_s: float = 2.0,
                 rand: Callable[[], float] = random.random) -> None:
        super().__init__(snapshot_retention_ms, now_ms)
        self.keys = RedisCodeKeys(prefix)
        self.url = url
        self.address = redacted_url(url)
        self.where = f"redis {self.address} {self.keys.sources}"   # named in FunctionView's not-found messages
        self.check_interval_ms = check_interval_ms
        self.max_source_bytes = max_source_bytes
        self._clock_ms = clock_ms
        self._call_timeout_s = call_timeout_s
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._rand = rand
        self._missing_logged = False
        self._follower = Follower(self._run, "function-code-redis")
        self.redis_epoch: int | None = None          # the epoch key as last read
        self.connected = False
        self.outages = 0
        self.reads = 0
        self.last_error: str | None = None

    # ---- state changes ------------------------------------------------------------------

    def apply_snapshot(self, redis_epoch: int | None, sources: dict[bytes, bytes], now_ms: int) -> int:
        """The complete hash as of ``redis_epoch`` (None: no epoch key); the current epoch."""
        self.redis_epoch = redis_epoch
        if redis_epoch is None:
            if not self._missing_logged:
                self._missing_logged = True
                log_event(logger, "function_code_redis_empty", logging.WARNING,
                          message=f"Redis {self.address} has no {self.keys.epoch!r} key (nothing pushed yet, "
                                  f"or Redis lost its data); keeping code epoch {self._epoch}",
                          epoch=self._epoch)
            return self._epoch
        self._missing_logged = False
        values: dict[str, str | None] = {}
        for key, value in sources.items():
            fid = self._fid(key)
            if fid is not None:
                values[fid] = self._store.remember(f"{fid} ({self.keys.sources} field)", value,
                                                   self.max_source_bytes)
        self._values = values
        digests = {fid: d for fid, d in values.items() if d is not None}
        if self._store.advance(redis_epoch, digests, now_ms, self._live()):
            log_event(logger, "function_code_epoch", epoch=self._epoch, functions=len(digests),
                      source="redis", redis_epoch=redis_epoch)
        return self._epoch

    def _fid(self, key: bytes) -> str | None:
        try:
            fid = key.decode("utf-8")
        except UnicodeDecodeError:
            logger.warning("function field %r of %s is not UTF-8; ignored", key, self.keys.sources)
            return None
        if not valid_function_id(fid):
            logger.warning("function field %r of %s is not a valid function id; ignored", fid, self.keys.sources)
            return None
        return fid

    # ---- following Redis ------------------------------------------------------------------

    async def start(self, wait_s: float = 5.0) -> bool:
        """Read the sources (waiting up to ``wait_s``) and follow them; False if Redis
        has not answered yet (the view fills in when it does)."""
        return await self._follower.start(wait_s)

    async def stop(self) -> None:
        await self._follower.stop()
        self.connected = False

    async def _read(self, client) -> None:
        epoch, sources = await read_sources(client, self.keys)
        self.reads += 1
        self.apply_snapshot(epoch, sources, self._clock_ms())

    async def _run(self) -> None:
        failures = 0
        interval_s = self.check_interval_ms / 1000.0
        while True:
            client = pubsub = None
            try:
                client = redis_client(self.url, self._call_timeout_s)
                pubsub = client.pubsub()
                db = int(client.connection_pool.connection_kwargs.get("db", 0) or 0)
                channels = (self.keys.channel, self.keys.keyspace_channel(db))
                await pubsub.subscribe(*channels)
                await self._subscribed(pubsub, len(channels))
                await self._read(client)     # once subscribed: no push between the two goes unheard
                self._follower.loaded()
                if not self.connected:
                    self.connected = True
                    if failures:
                        log_event(logger, "function_code_redis_back", address=self.address,
                                  epoch=self._epoch, redis_epoch=self.redis_epoch,
                                  message=f"Redis {self.address} is back; following {self.keys.sources} again")
                failures = 0
                loop = asyncio.get_running_loop()
                next_check = loop.time() + interval_s
                while True:
                    msg = await pubsub.get_message(timeout=max(0.001, next_check - loop.time()))
                    if msg is not None and msg.get("type") == "message":
                        while await pubsub.get_message(timeout=0) is not None:
                            pass                  # a burst of pushes costs one read
                        await self._read(client)
                        continue
                    if loop.time() >= next_check:
                        next_check = loop.time() + interval_s
                        if parse_epoch(await client.get(self.keys.epoch), self.keys.epoch) != self.redis_epoch:
                            await self._read(client)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - Redis trouble: keep the last snapshot, retry
                failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                if self.connected or failures == 1:
                    self.outages += 1
                    log_event(logger, "function_code_redis_unavailable", logging.WARNING,
                              address=self.address, error=self.last_error, epoch=self._epoch,
                              message=f"function code: Redis {self.address} unavailable ({self.last_error}); "
                                      f"keeping code epoch {self._epoch}, reconnecting with backoff")
                self.connected = False
                delay = min(self._backoff_max_s, self._backoff_initial_s * 2 ** min(failures - 1, 20))
                await asyncio.sleep(delay * (0.8 + 0.4 * self._rand()))
            finally:
                try:
                    await asyncio.wait_for(self._close(pubsub, client), self._call_timeout_s)
                except Exception:  # noqa: BLE001 - a broken connection closes as it can
                    pass

    async def _subscribed(self, pubsub, n: int) -> None:
        """Wait for the server to confirm the ``n`` subscriptions."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._call_timeout_s
        confirmed = 0
        while confirmed < n:
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError(f"Redis did not confirm SUBSCRIBE within {self._call_timeout_s:g} s")
            msg = await pubsub.get_message(timeout=left)
            if msg is not None and msg.get("type") == "subscribe":
                confirmed += 1

    @staticmethod
    async def _close(pubsub, client) -> None:
        if pubsub is not None:
            await pubsub.aclose()
        if client is not None:
            await client.aclose()
