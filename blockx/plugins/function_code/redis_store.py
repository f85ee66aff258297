"""Where function code sits in Redis (FUNCTIONS_SOURCE=redis), and the two
transactions that read and write it, shared by the Worker's follower
(function_code.redis) and `blockx functions push|list --redis`.

Layout under the prefix P (functionsRedisPrefix, default "blockx:functions:"):
- ``P + "sources"``: a hash, function id -> the function's Python source;
- ``P + "epoch"``: an integer, INCR'd in the same MULTI/EXEC as every write of the hash;
- ``P + "changed"``: a pub/sub channel; a push PUBLISHes on it inside that same
  transaction, so a subscriber hears of a push only once all of it is written.

A read is one MULTI/EXEC (GET epoch, HGETALL sources), a push one MULTI/EXEC
(HSET, INCR, PUBLISH) after checking the keys under WATCH, so a reader never
sees half a push and a push never half-applies on a key of the wrong type.
This module imports nothing of the Worker: the client commands run from the
base install (redis-py is imported only when a command talks to Redis)."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from blockx.plugins.function_code.view import FunctionCodeError
from blockx.redaction import redact_url

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_REDIS_PREFIX = "blockx:functions:"
DEFAULT_CHECK_INTERVAL_MS = 1000
PUSH_WATCH_RETRIES = 10
REDIS_URL_SCHEMES = ("redis", "rediss", "unix")


class RedisCodeError(FunctionCodeError):
    """The Redis keys of the function code cannot be used as they are."""


class RedisCodeKeys:
    """The key names of one prefix (the only place that spells them)."""

    __slots__ = ("prefix", "sources", "epoch", "channel")

    def __init__(self, prefix: str) -> None:
        if not prefix or any(c.isspace() or not c.isprintable() for c in prefix):
            raise ValueError(f"functions Redis prefix {prefix!r} must be non-empty, without spaces "
                             "or control characters")
        self.prefix = prefix
        self.sources = prefix + "sources"
        self.epoch = prefix + "epoch"
        self.channel = prefix + "changed"

    def keyspace_channel(self, db: int) -> str:
        return f"__keyspace@{db}__:{self.epoch}"


def redacted_url(url: str) -> str:
    """The URL without its password (or a ``?password=``), for logs and error messages."""
    return redact_url(url)


def redis_client(url: str, timeout_s: float):
    """An asyncio Redis client of ``url`` with no retries of its own (its callers back off)."""
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    return aioredis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s,
                                   retry=Retry(NoBackoff(), 0), health_check_interval=0)


def parse_epoch(raw: bytes | None, key: str) -> int | None:
    if raw is None:
        return None
    try:
        epoch = int(raw)
    except ValueError:
        raise RedisCodeError(f"Redis key {key!r} holds {raw[:40]!r}, not an integer epoch") from None
    if epoch < 0:
        raise RedisCodeError(f"Redis key {key!r} holds {epoch}, a negative epoch")
    return epoch


async def read_sources(client, keys: RedisCodeKeys) -> tuple[int | None, dict[bytes, bytes]]:
    """(epoch or None when there is no epoch key, {function id: source}) in one MULTI/EXEC."""
    async with client.pipeline(transaction=True) as p:
        p.get(keys.epoch)
        p.hgetall(keys.sources)
        raw_epoch, sources = await p.execute()
    return parse_epoch(raw_epoch, keys.epoch), sources


async def push_sources(client, keys: RedisCodeKeys, items: list[tuple[str, bytes]]) -> int:
    """Write ``items`` (function id, source) into the hash, bump the epoch and publish,
    all in one MULTI/EXEC; the new epoch. The keys are checked first (under WATCH), so
    a transaction never half-applies on a key of the wrong type."""
    from redis.exceptions import WatchError

    for _ in range(PUSH_WATCH_RETRIES):
        async with client.pipeline(transaction=True) as p:
            try:
                await p.watch(keys.epoch, keys.sources)
                parse_epoch(await p.get(keys.epoch), keys.epoch)
                kind = await p.type(keys.sources)
                kind = kind.decode() if isinstance(kind, bytes) else kind
                if kind not in ("hash", "none"):
                    raise RedisCodeError(f"Redis key {keys.sources!r} is a {kind}, not a hash")
                p.multi()
                p.hset(keys.sources, mapping=dict(items))
                p.incr(keys.epoch)
                p.publish(keys.channel, b"push")
                _n, epoch, _receivers = await p.execute()
                return int(epoch)
            except WatchError:
                continue            # another push in between: check again and retry
    raise RedisCodeError(f"the push lost {PUSH_WATCH_RETRIES} races for {keys.epoch!r} in a row; try again")


def redis_source_problems(url: str, prefix: str, check_interval_ms: int, name: Callable[[str], str]) -> list[str]:
    """The rules of functionsRedisUrl, functionsRedisPrefix and
    functionsRedisCheckIntervalMs (`name` words each setting for the operator)."""
    out: list[str] = []
    try:
        parts = urlsplit(url)
        parts.port                                  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        out.append(f"{name('functionsRedisUrl')} {redacted_url(url)!r} is not a URL ({exc})")
    else:
        if parts.scheme not in REDIS_URL_SCHEMES or not (parts.hostname or parts.path):
            out.append(f"{name('functionsRedisUrl')} must be redis://host:port/db, rediss://host:port/db "
                       f"or unix:///path (got {redacted_url(url)!r})")
    try:
        RedisCodeKeys(prefix)
    except ValueError as exc:
        out.append(f"{name('functionsRedisPrefix')}: {exc}")
    if not 10 <= check_interval_ms <= 3_600_000:
        out.append(f"{name('functionsRedisCheckIntervalMs')} must be between 10 and 3600000 "
                   f"(got {check_interval_ms})")
    return out
