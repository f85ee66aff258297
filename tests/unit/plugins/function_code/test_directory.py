import gc
import hashlib
import logging
import os

import pytest

from blockx.app.config import default_functions_dir
from blockx.plugins.function_code.directory import (FunctionCodeDirectory, FunctionCodeError, FunctionNotFound,
                                          SnapshotUnavailable)

RET = 1000  # snapshot retention (ms) in these tests


def put(d, name, text):
    """Write a file and move its mtime forward, so the edit is visible whatever the
    filesystem timestamp granularity."""
    p = d / name
    old = p.stat().st_mtime_ns if p.exists() else 0
    p.write_text(text)
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, max(st.st_mtime_ns, old + 1_000_000_000)))
    return p


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def fdir(tmp_path):
    put(tmp_path, "add.py", "def main(a, b):\n    return a + b\n")
    put(tmp_path, "one.py", "def main():\n    return 1\n")
    return tmp_path


def test_scan_digests_and_resolve(fdir):
    code = FunctionCodeDirectory(str(fdir), RET)
    epoch = code.current_epoch(0)
    assert epoch == 1
    view = code.pin(epoch, 0)
    assert view.function_ids() == ["add", "one"]
    digest, entry = view.resolve("add")
    assert digest == sha("def main(a, b):\n    return a + b\n") and entry == "main"
    assert view.source_for(digest) == "def main(a, b):\n    return a + b\n"
    assert code.source_for(digest) == view.source_for(digest)


def test_unknown_function_names_the_epoch_and_known_functions(fdir):
    code = FunctionCodeDirectory(str(fdir), RET)
    view = code.pin(code.current_epoch(0), 0)
    with pytest.raises(FunctionNotFound) as ei:
        view.resolve("nope")
    msg = str(ei.value)
    assert "function 'nope' not found in code epoch 1" in msg and "known: add, one" in msg
    assert ei.value.error_kind == "FUNCTION_NOT_FOUND" and ei.value.retryable is False
    assert view.digest_of("nope") is None
    with pytest.raises(FunctionNotFound, match="no function source with digest"):
        code.source_for("0" * 64)


def test_ignored_files(fdir):
    put(fdir, "_private.py", "x = 1\n")
    put(fdir, ".hidden.py", "x = 1\n")
    put(fdir, "notes.txt", "x")
    (fdir / "pkg.py").mkdir()  # a directory named like a function file
    (fdir / "sub").mkdir()
    put(fdir / "sub", "deep.py", "def main(): pass\n")
    (fdir / "bad.py").write_bytes(b"\xff\xfe not utf-8")
    code = FunctionCodeDirectory(str(fdir), RET)
    assert code.pin(1, 0).function_ids() == ["add", "one"]


def test_epoch_moves_only_when_a_digest_changes(fdir):
    code = FunctionCodeDirectory(str(fdir), RET, rescan_interval_ms=100)
    assert code.current_epoch(0) == 1
    p = fdir / "add.py"
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))  # touched, same content
    assert code.current_epoch(200) == 1
    put(fdir, "add.py", "def main(a, b):\n    return a + b + 0\n")
    assert code.current_epoch(250) == 1  # within the rescan interval: not looked at yet
    assert code.current_epoch(300) == 2
    put(fdir, "new.py", "def main():\n    return 'new'\n")
    assert code.current_epoch(400) == 3
    (fdir / "one.py").unlink()
    assert code.current_epoch(500) == 4
    assert code.pin(4, 500).function_ids() == ["add", "new"]


def test_pin_keeps_the_old_snapshot_for_a_running_task(fdir):
    code = FunctionCodeDirectory(str(fdir), RET)
    old = code.pin(code.current_epoch(0), 0)
    old_digest, _ = old.resolve("add")
    put(fdir, "add.py", "def main(a, b):\n    return a - b\n")
    assert code.current_epoch(200) == 2
    new = code.pin(2, 200)
    assert new.resolve("add")[0] == sha("def main(a, b):\n    return a - b\n") != old_digest
    assert old.resolve("add")[0] == old_digest
    assert old.source_for(old_digest) == "def main(a, b):\n    return a + b\n"
    # a view serves only the code of its own snapshot
    with pytest.raises(FunctionNotFound, match="not part of code epoch 1"):
        old.source_for(new.resolve("add")[0])


def test_retention_purges_unpinned_superseded_snapshots(fdir):
    code = FunctionCodeDirectory(str(fdir), RET)
    old_digest = code.pin(1, 0).resolve("add")[0]
    gc.collect()  # the temporary view above is gone: epoch 1 is unpinned
    put(fdir, "add.py", "def main(a, b):\n    return 0\n")
    assert code.current_epoch(200) == 2  # epoch 1 superseded at 200
    assert code.pin(1, 1199).epoch == 1  # still within retention
    gc.collect()
    code.current_epoch(1200)
    assert code.retained_epochs() == [2]
    with pytest.raises(SnapshotUnavailable, match="epoch 1 was purged"):
        code.pin(1, 1200)
    with pytest.raises(FunctionNotFound):
        code.source_for(old_digest)  # its source went with it
    with pytest.raises(SnapshotUnavailable, match="epoch 9 does not exist"):
        code.pin(9, 1200)


def test_a_live_view_keeps_its_snapshot_past_retention(fdir):
    code = FunctionCodeDirectory(str(fdir), RET)
    view = code.pin(1, 0)
    digest = view.resolve("add")[0]
    put(fdir, "add.py", "def main(a, b):\n    return 0\n")
    code.current_epoch(200)
    code.current_epoch(10_000)
    assert code.retained_epochs() == [1, 2]
    assert view.source_for(digest).startswith("def main(a, b)")
    view.release()
    code.current_epoch(10_001)
    assert code.retained_epochs() == [2]


def test_dropping_the_view_unpins_it(fdir):
    code = FunctionCodeDirectory(str(fdir), RET)
    with code.pin(1, 0):
        pass
    view = code.pin(1, 0)
    put(fdir, "one.py", "def main():\n    return 2\n")
    code.current_epoch(200)
    del view
    gc.collect()
    code.current_epoch(5000)
    assert code.retained_epochs() == [2]


def test_shared_sources_survive_the_purge_of_an_older_snapshot(fdir):
    code = FunctionCodeDirectory(str(fdir), RET)
    one_digest = code.pin(1, 0).resolve("one")[0]
    gc.collect()
    put(fdir, "add.py", "def main(a, b):\n    return 0\n")
    code.current_epoch(200)
    code.current_epoch(5000)
    assert code.retained_epochs() == [2]
    assert code.source_for(one_digest) == "def main():\n    return 1\n"


def test_missing_directory(tmp_path, caplog):
    with pytest.raises(FunctionCodeError, match="does not exist"):
        FunctionCodeDirectory(str(tmp_path / "absent"), RET)
    d = tmp_path / "fns"
    d.mkdir()
    put(d, "f.py", "def main():\n    return 1\n")
    code = FunctionCodeDirectory(str(d), RET)
    (d / "f.py").unlink()
    d.rmdir()
    with caplog.at_level(logging.WARNING, logger="blockx.plugins.function_code"):
        assert code.current_epoch(1000) == 1  # the last snapshot stays current
    assert "cannot be listed" in caplog.text
    assert code.pin(1, 1000).function_ids() == ["f"]


def test_empty_directory_is_epoch_one(tmp_path):
    code = FunctionCodeDirectory(str(tmp_path), RET)
    assert code.current_epoch(0) == 1 and code.pin(1, 0).function_ids() == []
    put(tmp_path, "f.py", "def main():\n    return 1\n")
    assert code.refresh(1) == 2


def test_oversized_source_is_skipped(tmp_path):
    put(tmp_path, "big.py", "x = 1\n" * 100)
    code = FunctionCodeDirectory(str(tmp_path), RET, max_source_bytes=100)
    assert code.pin(1, 0).function_ids() == []


def test_shipped_examples_all_load():
    code = FunctionCodeDirectory(default_functions_dir(), RET)
    view = code.pin(code.current_epoch(0), 0)
    assert {"add", "add1", "square", "sum_squares", "echo", "echo_io", "sleep_ms", "fail"} <= set(view.function_ids())
    for fid in view.function_ids():
        src = view.source_for(view.resolve(fid)[0])
        compile(src, fid, "exec")
        assert "def main(" in src


def test_pure_examples_compute_what_their_docs_say():
    code = FunctionCodeDirectory(default_functions_dir(), RET)
    view = code.pin(1, 0)

    def run(fid, *args):
        ns = {}
        exec(compile(view.source_for(view.resolve(fid)[0]), fid, "exec"), ns)
        return ns["main"](*args)

    assert run("add", 1, 2) == 3
    assert run("add1", 41) == 42
    assert run("square", 7) == 49
    assert run("echo", {"k": 1}) == {"k": 1} and run("echo", 1, 2) == [1, 2]
    with pytest.raises(RuntimeError, match="boom"):
        run("fail")
