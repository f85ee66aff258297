"""bundleWrite: one Parquet file per task, atomically replaced."""

from __future__ import annotations

import os

import duckdb
import orjson
import pytest

from blockx.plugins.data.plane import DataPlane
from blockx.plugins.plugin_api import PluginContext
from blockx.plugins.writers.bundle_write import BundleWritePlugin


@pytest.fixture
async def plane(tmp_path):
    p = DataPlane({}, bundle_root=str(tmp_path))
    yield p
    await p.aclose()


def read(path):
    return duckdb.connect().execute(f"SELECT * FROM read_parquet('{path}')").fetchall()


async def test_writes_one_file_per_task_and_replaces_it(plane, tmp_path):
    w = BundleWritePlugin(plane)
    ctx = PluginContext(task_id="task-1")
    outs = [orjson.dumps({"id": 1, "x": 1.5}), orjson.dumps([{"id": 2}, {"id": 3, "x": 2, "s": "a"}])]
    r = await w.execute(b'{"dir": "out/day"}', outs, ctx)
    assert r.ok, r.message
    assert orjson.loads(r.details) == {"rows": 3, "path": "out/day/task-1.parquet"}
    path = tmp_path / "out" / "day" / "task-1.parquet"
    assert read(path) == [(1, 1.5, None), (2, None, None), (3, 2.0, "a")]
    r = await w.execute(b'{"dir": "out/day"}', [orjson.dumps({"id": 9})], ctx)
    assert r.ok
    assert read(path) == [(9,)]
    assert sorted(os.listdir(path.parent)) == ["task-1.parquet"]      # no temporary left
    r = await w.execute(b'{"dir": "out/day"}', [], ctx)
    assert r.ok and not path.exists()


@pytest.mark.parametrize("conf,outs,needle", [
    (b'{"dir": "../x"}', [b'{"a":1}'], "leaves the bundle root"),
    (b'{"dir": "/tmp"}', [b'{"a":1}'], "must be relative"),
    (b'{}', [b'{"a":1}'], "dir must be a non-empty string"),
    (b'{"dir": "o", "target": "main"}', [b'{"a":1}'], "unknown config key(s) 'target'"),
    (b'{"dir": "o"}', [b'[1, 2]'], "output 0 item 0 is number"),
    (b'{"dir": "o"}', [b'{"a": 1}', b'{"a": "x"}', b'{"a": [1]}'], "nothing written"),
])
async def test_failures_write_nothing(plane, tmp_path, conf, outs, needle):
    r = await BundleWritePlugin(plane).execute(conf, outs, PluginContext(task_id="t"))
    assert not r.ok and needle in r.message, r.message
    assert not (tmp_path / "o" / "t.parquet").exists()


async def test_task_ids_cannot_leave_the_directory(plane, tmp_path):
    r = await BundleWritePlugin(plane).execute(b'{"dir": "o"}', [b'{"a": 1}'], PluginContext(task_id="../../evil"))
    assert r.ok, r.message
    assert os.listdir(tmp_path / "o") == ["..%2F..%2Fevil.parquet"]


def _many_rows(n: int = 300_000) -> list[bytes]:
    return [orjson.dumps([{"id": i, "x": i * 0.5, "s": f"row {i}"} for i in range(j, j + 10_000)])
            for j in range(0, n, 10_000)]


async def _until(cond, timeout: float = 20.0) -> None:
    import asyncio
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.001)


async def test_a_write_over_the_io_timeout_fails_retryable_and_never_lands(plane, tmp_path):
    import asyncio
    w = BundleWritePlugin(plane)
    r = await w.execute(b'{"dir": "slow"}', _many_rows(), PluginContext(task_id="t", io_timeout_ms=1))
    assert not r.ok and r.retryable
    assert r.message == ("bundleWrite: nothing written: writing the file took longer than phaseIoTimeoutMs "
                         "(1 ms); raise phaseIoTimeoutMs (PHASE_IO_TIMEOUT_MS) for larger bundles")
    # Wait for the abandoned thread itself to end (it runs on the loop's default
    # executor; a fixed sleep was outlived on a loaded machine), then nothing may be
    # there: no file, no temporary.
    await asyncio.get_running_loop().shutdown_default_executor()
    assert os.listdir(tmp_path / "slow") == []


async def test_a_write_cancelled_by_the_task_end_never_renames_its_file_afterwards(plane, tmp_path):
    import asyncio
    w = BundleWritePlugin(plane)
    task = asyncio.get_running_loop().create_task(
        w.execute(b'{"dir": "gone"}', _many_rows(), PluginContext(task_id="t")))
    await _until(lambda: (tmp_path / "gone").exists())    # the write has started in its thread
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.get_running_loop().shutdown_default_executor()     # as above: its thread has ended
    assert os.listdir(tmp_path / "gone") == []


async def test_files_are_0640_and_new_directories_0700(plane, tmp_path):
    os.chmod(tmp_path, 0o755)                  # the operator's root keeps its own mode
    r = await BundleWritePlugin(plane).execute(b'{"dir": "a/b"}', [b'{"id": 1}'], PluginContext(task_id="t"))
    assert r.ok, r.message
    assert os.stat(tmp_path / "a" / "b" / "t.parquet").st_mode & 0o777 == 0o640
    assert os.stat(tmp_path / "a" / "b").st_mode & 0o777 == 0o700
    assert os.stat(tmp_path / "a").st_mode & 0o777 == 0o700
    assert os.stat(tmp_path).st_mode & 0o777 == 0o755


@pytest.mark.parametrize("field", ['x" , 42 AS "y', "a;b", "a--b", "a(b)", "x\n", "1x"])
async def test_a_bad_field_name_keeps_the_previous_file_and_names_row_and_field(plane, tmp_path, field):
    w = BundleWritePlugin(plane)
    ctx = PluginContext(task_id="t")
    assert (await w.execute(b'{"dir": "o"}', [b'{"id": 1}'], ctx)).ok
    r = await w.execute(b'{"dir": "o"}', [b'{"id": 2}', orjson.dumps([{"id": 3}, {"id": 4, field: 1}])], ctx)
    assert not r.ok
    assert f"nothing written: row 2 (output 1): field {field!r} is not a plain SQL identifier" in r.message, r.message
    assert read(tmp_path / "o" / "t.parquet") == [(1,)]
    assert os.listdir(tmp_path / "o") == ["t.parquet"]


async def test_field_names_differing_only_in_case_are_refused(plane, tmp_path):
    r = await BundleWritePlugin(plane).execute(b'{"dir": "o"}', [b'{"id": 1, "ID": 2}'], PluginContext(task_id="t"))
    assert not r.ok and "differs from field 'id' only in case" in r.message, r.message


@pytest.mark.parametrize("task_id", ["a" * 256, "é" * 128, "/" * 256], ids=["ascii", "utf8", "slashes"])
async def test_a_task_id_of_the_longest_allowed_length_still_writes_its_own_file(plane, tmp_path, task_id):
    # A task id may be 256 bytes; escaped for a file name it may be three times
    # that, past the 255 bytes a file name may have. The name stays bounded and
    # distinct per task id, and a retried task still replaces its own file.
    w = BundleWritePlugin(plane)
    for rows in ([{"id": 1}], [{"id": 2}]):
        r = await w.execute(b'{"dir": "o"}', [orjson.dumps(rows)], PluginContext(task_id=task_id))
        assert r.ok, r.message[:300]
    other = task_id[:-1] + ("b" if task_id[-1] != "b" else "c")
    r = await w.execute(b'{"dir": "o"}', [orjson.dumps({"id": 3})], PluginContext(task_id=other))
    assert r.ok, r.message[:300]
    names = sorted(os.listdir(tmp_path / "o"))
    assert len(names) == 2 and all(len(n.encode()) <= 200 and n.endswith(".parquet") for n in names), names
    path = orjson.loads((await w.execute(b'{"dir": "o"}', [orjson.dumps({"id": 2})],
                                         PluginContext(task_id=task_id))).details)["path"]
    assert read(tmp_path / path) == [(2,)]
