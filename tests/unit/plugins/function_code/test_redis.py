"""FunctionCodeRedis's state changes (no Redis): epochs are the Redis epoch key, pins and
retention follow the directory and etcd sources' rules."""
import gc
import hashlib

import pytest

from blockx.plugins.function_code.directory import FunctionNotFound, SnapshotUnavailable
from blockx.plugins.function_code.redis import (RedisCodeError, RedisCodeKeys, FunctionCodeRedis, parse_epoch,
                                                redacted_url)

RET = 1000
P = "blockx:functions:"


def sha(b):
    return hashlib.sha256(b).hexdigest()


def code():
    return FunctionCodeRedis("redis://127.0.0.1:1/0", P, RET)


def test_the_keys_of_a_prefix():
    k = RedisCodeKeys(P)
    assert (k.sources, k.epoch, k.channel) == ("blockx:functions:sources", "blockx:functions:epoch",
                                               "blockx:functions:changed")
    assert k.keyspace_channel(3) == "__keyspace@3__:blockx:functions:epoch"
    for bad in ("", "has space:", "tab\t", "nl\n"):
        with pytest.raises(ValueError, match="must be non-empty, without spaces"):
            RedisCodeKeys(bad)


def test_before_the_first_read_the_view_is_empty_epoch_0_and_names_redis():
    c = code()
    assert c.current_epoch(0) == 0
    with c.pin(0, 0) as v, pytest.raises(FunctionNotFound, match="redis redis://127.0.0.1:1/0 blockx:functions:sources"):
        v.resolve("add")


def test_the_epoch_is_the_redis_epoch_of_the_last_change_to_the_code():
    c = code()
    add, one = b"def main(a, b):\n    return a + b\n", b"def main():\n    return 1\n"
    assert c.apply_snapshot(4, {b"add": add, b"one": one}, 0) == 4
    with c.pin(4, 0) as v:
        assert v.resolve("add") == (sha(add), "main")
        assert v.source_for(sha(one)) == one.decode()
    assert c.apply_snapshot(5, {b"add": add, b"one": one}, 10) == 4, "the same code pushed again keeps the epoch"
    two = b"def main():\n    return 2\n"
    assert c.apply_snapshot(6, {b"add": add, b"one": two}, 20) == 6
    with c.pin(6, 20) as v:
        assert v.resolve("one")[0] == sha(two) and v.function_ids() == ["add", "one"]
    assert c.redis_epoch == 6


def test_no_epoch_key_keeps_the_last_snapshot_and_a_wiped_redis_counts_on_from_it():
    c = code()
    c.apply_snapshot(7, {b"f": b"V = 1\n"}, 0)
    assert c.apply_snapshot(None, {}, 10) == 7, "a Redis that lost its data does not empty the Worker"
    with c.pin(7, 10) as v:
        assert v.function_ids() == ["f"]
    assert c.apply_snapshot(1, {b"f": b"V = 2\n"}, 20) == 8, "epochs only grow"
    assert c.apply_snapshot(2, {b"f": b"V = 2\n"}, 30) == 8


def test_a_pinned_snapshot_survives_retention_and_an_unpinned_one_is_purged():
    c = code()
    c.apply_snapshot(1, {b"f": b"V = 1\n"}, 0)
    pinned = c.pin(1, 0)
    c.apply_snapshot(2, {b"f": b"V = 2\n"}, 100)
    c.apply_snapshot(3, {b"f": b"V = 3\n"}, 200)
    assert c.current_epoch(100 + RET + 500) == 3
    assert c.retained_epochs() == [1, 3], "2 is past retention and unpinned; 1 is pinned"
    assert pinned.source_for(sha(b"V = 1\n")) == "V = 1\n"
    with pytest.raises(SnapshotUnavailable, match="purged"):
        c.pin(2, 100 + RET + 500)
    pinned.release()
    del pinned
    gc.collect()
    c.current_epoch(100 + RET + 600)
    assert c.retained_epochs() == [3]
    with pytest.raises(FunctionNotFound):
        c.source_for(sha(b"V = 1\n"))


def test_unusable_values_and_fields_are_left_out():
    c = code()
    c.max_source_bytes = 10
    epoch = c.apply_snapshot(9, {b"ok": b"V = 1\n", b"latin": b"caf\xe9", b"big": b"x" * 11,
                                 b"bad name": b"V = 1\n", b"sub/dir": b"V = 1\n", b"\xff": b"V = 1\n"}, 0)
    with c.pin(epoch, 0) as v:
        assert v.function_ids() == ["ok"]


def test_the_epoch_key_must_hold_a_non_negative_integer():
    assert parse_epoch(None, "k") is None and parse_epoch(b"12", "k") == 12
    with pytest.raises(RedisCodeError, match="'k' holds b'abc', not an integer epoch"):
        parse_epoch(b"abc", "k")
    with pytest.raises(RedisCodeError, match="negative"):
        parse_epoch(b"-1", "k")


@pytest.mark.parametrize("url,shown", [
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("redis://:s3cret@10.0.0.1:6379/2", "redis://:***@10.0.0.1:6379/2"),
    ("rediss://user:s3cret@cache.example:6380/0", "rediss://user:***@cache.example:6380/0"),
    ("unix:///run/redis.sock?db=1", "unix:///run/redis.sock?db=1"),
])
def test_urls_are_shown_without_their_password(url, shown):
    assert redacted_url(url) == shown
