"""FunctionCodeEtcd's state changes (no etcd): epochs are revisions, pins and retention
follow the directory source's rules."""
import gc
import hashlib

import pytest

from blockx.plugins.function_code.directory import FunctionNotFound, SnapshotUnavailable
from blockx.plugins.function_code.etcd import FunctionCodeEtcd, valid_function_id

RET = 1000
P = "/blockx/functions/"


def k(fid):
    return (P + fid).encode()


def sha(b):
    return hashlib.sha256(b).hexdigest()


def code():
    return FunctionCodeEtcd(["127.0.0.1:1"], P, RET)


def test_before_the_first_read_the_view_is_empty_epoch_0():
    c = code()
    assert c.current_epoch(0) == 0
    with c.pin(0, 0) as v, pytest.raises(FunctionNotFound, match="etcd /blockx/functions/"):
        v.resolve("add")


def test_the_epoch_is_the_revision_of_the_last_change_to_the_code():
    c = code()
    add, one = b"def main(a, b):\n    return a + b\n", b"def main():\n    return 1\n"
    assert c.apply_reset(17, {k("add"): add, k("one"): one}, 0) == 17
    with c.pin(17, 0) as v:
        assert v.resolve("add") == (sha(add), "main")
        assert v.source_for(sha(one)) == one.decode()
    assert c.apply_events(20, [(True, k("add"), add)], 10) == 17, "the same code pushed again keeps the epoch"
    two = b"def main():\n    return 2\n"
    assert c.apply_events(21, [(True, k("one"), two), (False, k("add"), b"")], 20) == 21
    with c.pin(21, 20) as v:
        assert v.function_ids() == ["one"] and v.resolve("one")[0] == sha(two)
    # After a reconnection, the reread prefix is compared with the current code.
    assert c.apply_reset(30, {k("one"): two}, 30) == 21
    assert c.apply_reset(31, {}, 31) == 31


def test_a_pinned_snapshot_survives_retention_and_an_unpinned_one_is_purged():
    c = code()
    c.apply_reset(5, {k("f"): b"V = 1\n"}, 0)
    pinned = c.pin(5, 0)
    c.apply_events(6, [(True, k("f"), b"V = 2\n")], 100)
    c.apply_events(7, [(True, k("f"), b"V = 3\n")], 200)
    assert c.current_epoch(100 + RET + 500) == 7
    assert c.retained_epochs() == [5, 7], "6 is past retention and unpinned; 5 is pinned"
    assert pinned.source_for(sha(b"V = 1\n")) == "V = 1\n"
    with pytest.raises(SnapshotUnavailable, match="purged"):
        c.pin(6, 100 + RET + 500)
    pinned.release()
    del pinned
    gc.collect()
    c.current_epoch(100 + RET + 600)
    assert c.retained_epochs() == [7]
    with pytest.raises(FunctionNotFound):
        c.source_for(sha(b"V = 1\n"))


def test_epochs_only_grow_even_if_etcd_restarts_from_a_lower_revision():
    c = code()
    c.apply_reset(50, {k("f"): b"V = 1\n"}, 0)
    assert c.apply_reset(3, {k("f"): b"V = 2\n"}, 10) == 51


def test_unusable_values_and_keys_are_left_out():
    c = code()
    c.max_source_bytes = 10
    epoch = c.apply_reset(9, {k("ok"): b"V = 1\n", k("latin"): b"caf\xe9", k("big"): b"x" * 11,
                              k("bad name"): b"V = 1\n", k("sub/dir"): b"V = 1\n"}, 0)
    with c.pin(epoch, 0) as v:
        assert v.function_ids() == ["ok"]


@pytest.mark.parametrize("fid,ok", [("add", True), ("sum_squares", True), ("v1.2-x", True), ("A9", True),
                                    ("_private", False), (".hidden", False), ("bad name", False), ("a/b", False),
                                    ("", False), ("x" * 129, False), ("f.py", False)])
def test_valid_function_ids(fid, ok):
    assert valid_function_id(fid) is ok
