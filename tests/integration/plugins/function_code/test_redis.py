"""FUNCTIONS_SOURCE=redis against a real redis-server: the push and read transactions,
following pushes (pub/sub, keyspace notifications, the periodic check), pinning, and
Redis down at start and while running."""
import asyncio
import hashlib
import logging
import statistics
import time

import pytest

from blockx.plugins.function_code.redis import (FunctionCodeRedis, RedisCodeError, RedisCodeKeys, push_sources,
                                                read_sources, redis_client)
from tests.support.redis import RedisServer, redis_fixture

P = "blockx:functions:"
KEYS = RedisCodeKeys(P)
RET = 60_000

redis_server = redis_fixture()


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def version_dir(v: int, n: int = 3, pad: int = 0) -> list[tuple[str, bytes]]:
    body = f"V = {v}\n# {'x' * pad}\n\ndef main():\n    return V\n".encode()
    return [(f"f{i}", body) for i in range(n)]


def events(caplog, name):
    return [r for r in caplog.records if getattr(r, "event", None) == name]


async def wait_for(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.001)


@pytest.fixture
async def client(redis_server):
    c = redis_client(redis_server.url, 2.0)
    yield c
    await c.aclose()


async def test_a_push_is_one_transaction_and_is_visible_in_milliseconds(redis_server, client):
    assert await read_sources(client, KEYS) == (None, {})
    assert await push_sources(client, KEYS, version_dir(1)) == 1
    epoch, sources = await read_sources(client, KEYS)
    assert epoch == 1 and set(sources) == {b"f0", b"f1", b"f2"}
    code = FunctionCodeRedis(redis_server.url, P, RET)
    try:
        assert await code.start() is True and code.connected
        assert code.current_epoch(0) == 1
        with code.pin(1, 0) as v:
            assert v.function_ids() == ["f0", "f1", "f2"]
        latencies = []
        for ver in range(2, 22):
            t0 = time.perf_counter()
            e = await push_sources(client, KEYS, version_dir(ver))
            await wait_for(lambda: code.current_epoch(0) == e)
            latencies.append((time.perf_counter() - t0) * 1000)
        latencies.sort()
        print(f"\npush-to-visible (push transaction included), 20 pushes: median "
              f"{statistics.median(latencies):.2f} ms, max {latencies[-1]:.2f} ms")
        assert statistics.median(latencies) < 200, latencies
        # The same directory pushed again bumps the Redis epoch but not the Worker's.
        e = await push_sources(client, KEYS, version_dir(21))
        await wait_for(lambda: code.redis_epoch == e)
        assert code.current_epoch(0) == 21
    finally:
        await code.stop()


async def test_a_reader_never_sees_half_a_push(redis_server, client):
    """Each push i writes 30 functions that all say V = i and makes the epoch i: a read
    that mixed two pushes, or an epoch with another push's sources, would show."""
    code = FunctionCodeRedis(redis_server.url, P, RET)
    await code.start()
    reader = redis_client(redis_server.url, 2.0)
    seen_reads, seen_views = set(), set()
    done = asyncio.Event()

    async def read_loop():
        while not done.is_set():
            epoch, sources = await read_sources(reader, KEYS)
            if epoch is None:
                continue
            versions = {src.split(b"\n", 1)[0] for src in sources.values()}
            assert versions == {f"V = {epoch}".encode()}, (epoch, versions)
            assert len(sources) == 30
            seen_reads.add(epoch)

    async def view_loop():
        while not done.is_set():
            e = code.current_epoch(0)
            if e:
                with code.pin(e, 0) as v:
                    firsts = {v.source_for(d).split("\n", 1)[0] for d in v.digests.values()}
                    assert firsts == {f"V = {e}"} and len(v.digests) == 30, (e, firsts)
                seen_views.add(e)
            await asyncio.sleep(0)

    async def push_loop():
        for ver in range(1, 41):
            assert await push_sources(client, KEYS, version_dir(ver, n=30, pad=20_000)) == ver
            await asyncio.sleep(0.002)
        await wait_for(lambda: code.current_epoch(0) == 40)
        done.set()

    try:
        await asyncio.wait_for(asyncio.gather(read_loop(), view_loop(), push_loop()), 60)
    finally:
        done.set()
        await reader.aclose()
        await code.stop()
    assert len(seen_reads) > 5 and len(seen_views) > 5, (seen_reads, seen_views)


async def test_a_task_pinned_to_an_epoch_keeps_its_code_after_a_push(redis_server, client):
    await push_sources(client, KEYS, version_dir(1))
    code = FunctionCodeRedis(redis_server.url, P, 0, clock_ms=lambda: 0)   # retention 0: only a pin keeps one
    await code.start()
    try:
        pinned = code.pin(code.current_epoch(0), 0)
        old_digest, _ = pinned.resolve("f0")
        await push_sources(client, KEYS, version_dir(2))
        await wait_for(lambda: code.current_epoch(10) == 2)
        assert code.retained_epochs() == [1, 2]
        assert pinned.resolve("f0")[0] == old_digest
        assert pinned.source_for(old_digest).startswith("V = 1\n")
        with code.pin(2, 10) as new:
            assert new.source_for(new.resolve("f0")[0]).startswith("V = 2\n")
        pinned.release()
        assert code.current_epoch(20) == 2 and code.retained_epochs() == [2]
    finally:
        await code.stop()


async def test_keyspace_notifications_alone_are_followed():
    """A write by hand (MULTI HSET INCR EXEC, no PUBLISH) on a server with keyspace
    notifications on is seen at once, the periodic check being an hour away."""
    with RedisServer(config={"notify-keyspace-events": "K$"}) as server:
        c = redis_client(server.url, 2.0)
        code = FunctionCodeRedis(server.url, P, RET, check_interval_ms=3_600_000)
        try:
            await code.start()
            async with c.pipeline(transaction=True) as p:
                p.hset(KEYS.sources, mapping={"f": b"V = 1\n"})
                p.incr(KEYS.epoch)
                await p.execute()
            t0 = time.monotonic()
            await wait_for(lambda: code.current_epoch(0) == 1, timeout=2.0)
            assert time.monotonic() - t0 < 2.0
        finally:
            await code.stop()
            await c.aclose()


async def test_the_periodic_check_catches_a_change_no_message_announced(redis_server, client):
    code = FunctionCodeRedis(redis_server.url, P, RET, check_interval_ms=200)
    try:
        await code.start()
        reads = code.reads
        async with client.pipeline(transaction=True) as p:      # no PUBLISH, no notifications on
            p.hset(KEYS.sources, mapping={"f": b"V = 1\n"})
            p.incr(KEYS.epoch)
            await p.execute()
        await asyncio.sleep(0.05)
        assert code.current_epoch(0) == 0, "nothing announced the write"
        await wait_for(lambda: code.current_epoch(0) == 1, timeout=2.0)
        assert code.reads == reads + 1, "one reread, from the epoch check"
    finally:
        await code.stop()


async def test_redis_down_at_start_then_up(caplog):
    caplog.set_level(logging.INFO, logger="blockx.plugins.function_code")
    server = RedisServer()
    server.reserve_port()
    code = FunctionCodeRedis(server.url, P, RET, backoff_max_s=0.3)
    try:
        assert await code.start(wait_s=0.5) is False
        assert code.current_epoch(0) == 0 and not code.connected
        await asyncio.sleep(0.5)                       # several failed attempts meanwhile
        down = events(caplog, "function_code_redis_unavailable")
        assert len(down) == 1, "one log line for the outage, not one per attempt"
        assert f"Redis {server.url} unavailable" in down[0].fields["message"]
        await server.astart()
        c = redis_client(server.url, 2.0)
        try:
            await push_sources(c, KEYS, version_dir(1))
        finally:
            await c.aclose()
        await wait_for(lambda: code.current_epoch(0) == 1, timeout=5.0)
        assert code.connected and len(events(caplog, "function_code_redis_back")) == 1
    finally:
        await code.stop()
        server.close()


async def test_redis_killed_keeps_the_last_snapshot_and_follows_after_it(caplog):
    caplog.set_level(logging.INFO, logger="blockx.plugins.function_code")
    with RedisServer() as server:
        c = redis_client(server.url, 2.0)
        await push_sources(c, KEYS, version_dir(1))
        await c.aclose()
        code = FunctionCodeRedis(server.url, P, RET, backoff_max_s=0.3)
        try:
            await code.start()
            pinned = code.pin(1, 0)
            server.kill()
            await wait_for(lambda: not code.connected, timeout=5.0)
            await asyncio.sleep(0.5)
            assert len(events(caplog, "function_code_redis_unavailable")) == 1
            assert code.current_epoch(0) == 1
            with code.pin(1, 0) as v:
                assert v.source_for(v.resolve("f0")[0]).startswith("V = 1\n"), "the last snapshot stays"
            await server.astart()                      # back, and empty: no persistence
            await wait_for(lambda: code.connected, timeout=5.0)
            assert code.current_epoch(0) == 1, "an empty Redis does not empty the Worker"
            assert len(events(caplog, "function_code_redis_empty")) == 1
            c = redis_client(server.url, 2.0)
            try:
                assert await push_sources(c, KEYS, version_dir(2)) == 1, "the wiped Redis counts from 1 again"
            finally:
                await c.aclose()
            await wait_for(lambda: code.current_epoch(0) == 2, timeout=5.0)
            assert pinned.source_for(pinned.resolve("f0")[0]).startswith("V = 1\n")
            pinned.release()
        finally:
            await code.stop()


async def test_a_push_onto_keys_of_the_wrong_type_writes_nothing(redis_server, client):
    await client.set(KEYS.epoch, b"not-a-number")
    with pytest.raises(RedisCodeError, match="not an integer epoch"):
        await push_sources(client, KEYS, version_dir(1))
    assert await client.exists(KEYS.sources) == 0
    await client.delete(KEYS.epoch)
    await client.set(KEYS.sources, b"a string")
    with pytest.raises(RedisCodeError, match="is a string, not a hash"):
        await push_sources(client, KEYS, version_dir(1))
    assert await client.exists(KEYS.epoch) == 0


async def test_a_hung_redis_is_noticed_by_the_periodic_check_and_followed_after_it(caplog):
    """SIGSTOP: the connection stays open but nothing answers (a partition, a stuck
    server); the epoch check times out, the last snapshot stays, SIGCONT resumes."""
    import os
    import signal

    caplog.set_level(logging.INFO, logger="blockx.plugins.function_code")
    with RedisServer() as server:
        c = redis_client(server.url, 2.0)
        await push_sources(c, KEYS, version_dir(1))
        code = FunctionCodeRedis(server.url, P, RET, check_interval_ms=100, call_timeout_s=0.5, backoff_max_s=0.3)
        try:
            await code.start()
            os.kill(server.pid, signal.SIGSTOP)
            try:
                t0 = time.monotonic()
                await wait_for(lambda: not code.connected, timeout=5.0)
                print(f"\nhung Redis noticed after {time.monotonic() - t0:.2f} s")
                assert code.current_epoch(0) == 1
                down = events(caplog, "function_code_redis_unavailable")
                assert len(down) == 1 and "TimeoutError" in down[0].fields["error"]
            finally:
                os.kill(server.pid, signal.SIGCONT)
            await wait_for(lambda: code.connected, timeout=5.0)
            await push_sources(c, KEYS, version_dir(2))
            await wait_for(lambda: code.current_epoch(0) == 2, timeout=5.0)
        finally:
            await code.stop()
            await c.aclose()


async def test_an_epoch_key_that_is_not_an_integer_keeps_the_last_snapshot_with_one_line(redis_server, client,
                                                                                        caplog):
    caplog.set_level(logging.INFO, logger="blockx.plugins.function_code")
    await push_sources(client, KEYS, version_dir(1))
    code = FunctionCodeRedis(redis_server.url, P, RET, check_interval_ms=50, backoff_max_s=0.2)
    try:
        await code.start()
        await client.set(KEYS.epoch, b"garbage")
        await wait_for(lambda: not code.connected, timeout=5.0)
        await asyncio.sleep(0.5)
        down = events(caplog, "function_code_redis_unavailable")
        assert len(down) == 1 and "holds b'garbage', not an integer epoch" in down[0].fields["error"]
        assert code.current_epoch(0) == 1
        await client.set(KEYS.epoch, b"7")
        await wait_for(lambda: code.connected, timeout=5.0)
        assert code.current_epoch(0) == 1, "the same code at another Redis epoch keeps the epoch"
    finally:
        await code.stop()
