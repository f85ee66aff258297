"""The sweep of bundle work files a dead writer left (plugins.data.work_files):
what a killed process held is removed, a live writer's work stays, and nothing
that is not exactly a writer's work file is touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from blockx.plugins.data.work_files import WORK_NAME, create_dir, release, sweep

HOLDER = textwrap.dedent("""
    import os, sys, time
    from blockx.plugins.data.plane import DataPlane
    from blockx.plugins.writers.bundle_write import BundleWritePlugin
    plane = DataPlane({}, bundle_root=sys.argv[1], duckdb_memory_limit_mb=64)
    class Ctx:
        task_id = "held"
        io_timeout_ms = 0
    stream = BundleWritePlugin(plane).open_stream(b'{"dir": "out"}', Ctx())
    import asyncio
    asyncio.run(stream.write([b'{"id": 1}', b'{"id": 2}']))
    print("spooled", flush=True)
    time.sleep(600)
""")


def _holder(root) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdout=subprocess.PIPE, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    assert p.stdout is not None and p.stdout.readline().strip() == "spooled"
    return p


def _work(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(t, n), root) for t, ds, fs in os.walk(root)
                  for n in ds + fs if WORK_NAME.fullmatch(n))


def test_a_killed_writers_work_is_removed_and_a_live_ones_kept(tmp_path):
    root = tmp_path / "bundles"
    live, dead = _holder(root), _holder(root)
    try:
        work = _work(root)
        assert len(work) == 2 and all(w.startswith("out/.held.parquet.") and w.endswith(".tmp.d") for w in work), work
        dead.send_signal(signal.SIGKILL)
        dead.wait(10)
        swept = sweep(str(root))          # right after the kill: no age needed
        assert len(swept.removed) == 1 and swept.busy == 1 and not swept.failed, swept
        assert _work(root) == sorted(set(work) - set(swept.removed))    # the live writer's is there
        assert os.path.isdir(root / "out")
    finally:
        live.kill()
        live.wait(10)
        dead.kill()
        dead.wait(10)
    assert len(sweep(str(root), min_age_s=0).removed) == 1 and _work(root) == []


def test_only_a_writers_names_are_swept_and_symlinks_never_followed(tmp_path):
    root = tmp_path / "bundles"
    (root / "a" / "b").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.parquet").write_text("x")
    left = [root / "a" / "b" / ".x.parquet.0123456789ab.tmp", root / "a" / ".y.parquet.0123456789ab.tmp.d"]
    left[0].write_text("half a file")
    left[1].mkdir()
    (left[1] / "y.parquet").write_text("half")
    (left[1] / "spill").symlink_to(outside, target_is_directory=True)     # removed as a link, not followed
    kept = [root / "a" / "x.parquet", root / "a" / ".hidden.tmp", root / "a" / ".z.parquet.0123456789AB.tmp",
            root / "a" / ".z.parquet.0123456789a.tmp", root / "a" / "z.parquet.0123456789ab.tmp.d.old"]
    for k in kept:
        k.write_text("user data")
    link = root / "a" / ".evil.parquet.0123456789ab.tmp.d"
    link.symlink_to(outside, target_is_directory=True)
    flink = root / ".evil.parquet.0123456789ab.tmp"
    flink.symlink_to(outside / "keep.parquet")
    swept = sweep(str(root), min_age_s=0)
    assert sorted(swept.removed) == ["a/.y.parquet.0123456789ab.tmp.d", "a/b/.x.parquet.0123456789ab.tmp"], swept
    assert not any(p.exists() for p in left)
    assert all(k.read_text() == "user data" for k in kept)
    assert link.is_symlink() and flink.is_symlink() and (outside / "keep.parquet").read_text() == "x"


def test_young_or_held_work_is_left(tmp_path):
    root = tmp_path / "bundles"
    root.mkdir()
    young = root / ".a.parquet.0123456789ab.tmp.new"      # a writer between creating and locking it
    young.write_text("just created")
    dead = root / ".c.parquet.0123456789ab.tmp"           # a work name unlocked: its writer is dead
    dead.write_text("half")
    held = root / ".b.parquet.0123456789ab.tmp.d"
    fd = create_dir(str(held), 0o700)
    try:
        swept = sweep(str(root), min_age_s=3600)
        assert swept.removed == [".c.parquet.0123456789ab.tmp"] and swept.young == 1 and swept.busy == 1, swept
        swept = sweep(str(root), min_age_s=0, now=time.time() + 10)
        assert swept.removed == [".a.parquet.0123456789ab.tmp.new"] and swept.busy == 1, swept
    finally:
        release(fd)
    assert sweep(str(root), min_age_s=0).removed == [".b.parquet.0123456789ab.tmp.d"]
