"""bundleWrite streamed: the batches of a task spooled into one private DuckDB and
renamed into place at commit; the same file as the whole-task write where the type
rule allows, a clear failure where it does not, nothing left after an abort."""

from __future__ import annotations

import asyncio
import os

import duckdb
import orjson
import pytest

from blockx.plugins.data.plane import DataPlane
from blockx.plugins.plugin_api import PluginContext, PluginError
from blockx.plugins.writers.bundle_write import BundleWritePlugin

CONF = b'{"dir": "out"}'


@pytest.fixture
async def plane(tmp_path):
    p = DataPlane({}, bundle_root=str(tmp_path), duckdb_memory_limit_mb=64)
    yield p
    await p.aclose()


def out(*values) -> list[bytes]:
    return [orjson.dumps(v) for v in values]


def parquet(path) -> tuple[list, list]:
    """(schema, rows) of a Parquet file, as DuckDB reads them back."""
    con = duckdb.connect()
    try:
        p = str(path).replace("'", "''")
        schema = con.execute(f"SELECT name, type, converted_type, logical_type, repetition_type "
                             f"FROM parquet_schema('{p}')").fetchall()
        rows = con.execute(f"SELECT * FROM read_parquet('{p}')").fetchall()
        return schema, rows
    finally:
        con.close()


async def streamed(plugin, batches: list[list[bytes]], task_id: str, conf: bytes = CONF):
    s = plugin.open_stream(conf, PluginContext(task_id=task_id))
    for b in batches:
        await s.write(b)
    r = await s.commit()
    await s.abort()                  # after the commit: nothing undone
    return r


async def both(plane, tmp_path, batches: list[list[bytes]]):
    """The same outputs written whole (stream false) and streamed in `batches`:
    (schema, rows) of each file."""
    w = BundleWritePlugin(plane)
    whole = [o for b in batches for o in b]
    r = await w.execute(b'{"dir": "out", "stream": false}', whole, PluginContext(task_id="whole"))
    assert r.ok, r.message
    r2 = await streamed(w, batches, "streamed")
    assert r2.ok, r2.message
    assert orjson.loads(r2.details) == {"rows": orjson.loads(r.details)["rows"], "path": "out/streamed.parquet"}
    assert sorted(os.listdir(tmp_path / "out")) == ["streamed.parquet", "whole.parquet"]   # nothing else left
    assert oct((tmp_path / "out" / "streamed.parquet").stat().st_mode & 0o777) == "0o640"
    return parquet(tmp_path / "out" / "whole.parquet"), parquet(tmp_path / "out" / "streamed.parquet")


@pytest.mark.parametrize("batches", [
    # one batch whose first rows have nulls or ints where later ones have floats / strings
    [out({"id": 1, "a": None, "b": 1, "c": None}, {"id": 2, "a": 1, "b": 2.5, "c": "x"},
         [{"id": 3, "a": "s", "b": None}, {"id": 4, "a": 2.5, "c": 7}])],
    # across batches: all null first, ints widening to floats, booleans to ints, a late column
    [out({"id": 1, "n": None, "f": 1, "t": True}),
     out({"id": 2, "n": "later", "f": 2**40, "t": 5}),
     out({"id": 3, "n": None, "f": 0.25, "t": None, "late": {"k": [1, 2]}}),
     out({"id": 4, "f": 2**63}), out({"id": 5, "f": 2**64 - 1})],
    # nested values of one type in every batch, fields missing from some rows
    [out(*({"id": i, "s": {"a": i, "b": f"x{i}"}, "l": [i, i + 1]} for i in range(50))),
     out(*({"id": i, "l": [i]} for i in range(50, 60)), {"id": 60, "s": {"a": 1, "b": None}})],
    # nested: nulls filled in and numbers widened inside structs and lists, in a later batch
    [out({"id": 1, "s": {"a": 1, "b": None}, "l": [1, None], "m": [[True]]}, {"id": 2, "s": None, "l": []}),
     out({"id": 3, "s": {"a": 2.5, "b": "x"}, "l": [2**40], "m": [[2, None]]}),
     out({"id": 4, "s": {"a": 2**63, "b": None}, "l": None, "m": [[0.5]]})],
    # a column null in every row of every batch
    [out({"id": 1, "z": None}), out({"id": 2, "z": None})],
    # many batches of many rows
    [out(*({"id": i, "x": i * 0.5, "s": f"row {i}"} for i in range(j, j + 5_000))) for j in range(0, 60_000, 5_000)],
])
async def test_streamed_file_equals_the_whole_task_file(plane, tmp_path, batches):
    whole, stream = await both(plane, tmp_path, batches)
    assert stream == whole


async def test_the_file_appears_only_at_commit_and_replaces_the_previous_one(plane, tmp_path):
    w = BundleWritePlugin(plane)
    assert (await w.execute(CONF, out({"old": 1}), PluginContext(task_id="t"))).ok
    s = w.open_stream(CONF, PluginContext(task_id="t"))
    await s.write(out(*({"id": i} for i in range(100))))
    await s.write(out(*({"id": i} for i in range(100, 150))))
    d = tmp_path / "out"
    assert parquet(d / "t.parquet")[1] == [(1,)]                 # the previous file, untouched
    hidden = [n for n in os.listdir(d) if n != "t.parquet"]
    assert len(hidden) == 1 and hidden[0].startswith(".t.parquet.") and hidden[0].endswith(".tmp.d")
    assert oct((d / hidden[0]).stat().st_mode & 0o777) == "0o700"
    r = await s.commit()
    assert r.ok and orjson.loads(r.details) == {"rows": 150, "path": "out/t.parquet"}, r
    assert os.listdir(d) == ["t.parquet"]
    assert parquet(d / "t.parquet")[1] == [(i,) for i in range(150)]


async def test_abort_leaves_no_file_and_no_temporary(plane, tmp_path):
    w = BundleWritePlugin(plane)
    assert (await w.execute(CONF, out({"old": 1}), PluginContext(task_id="t"))).ok
    s = w.open_stream(CONF, PluginContext(task_id="t"))
    await s.write(out(*({"id": i} for i in range(100))))
    await s.abort()
    assert os.listdir(tmp_path / "out") == ["t.parquet"]
    assert parquet(tmp_path / "out" / "t.parquet")[1] == [(1,)]
    s = w.open_stream(CONF, PluginContext(task_id="fresh"))
    await s.write(out({"id": 1}))
    await s.abort()
    assert os.listdir(tmp_path / "out") == ["t.parquet"]


async def test_a_task_without_rows_removes_its_file(plane, tmp_path):
    w = BundleWritePlugin(plane)
    assert (await w.execute(CONF, out({"old": 1}), PluginContext(task_id="t"))).ok
    r = await streamed(w, [[], out([])], "t")
    assert r.ok and orjson.loads(r.details) == {"rows": 0, "path": None}
    assert os.listdir(tmp_path / "out") == []


@pytest.mark.parametrize("batches,needle", [
    ([out({"id": 1, "v": 1}), out({"id": 2, "v": "x"})],
     "field 'v' is INTEGER in earlier rows and VARCHAR in rows 1-1"),
    ([out({"id": 1, "v": 1.5}), out({"id": 2, "v": "x"})], "field 'v' is DOUBLE in earlier rows and VARCHAR"),
    ([out({"id": 1, "v": {"a": 1}}), out({"id": 2, "v": {"a": 1, "b": 2}})],
     'field \'v\' is STRUCT("a" INTEGER) in earlier rows and STRUCT("a" INTEGER, "b" INTEGER)'),
    ([out({"id": 1, "v": [1]}), out({"id": 2, "v": ["x"]})], "field 'v' is INTEGER[] in earlier rows and VARCHAR[]"),
])
async def test_a_type_the_whole_task_would_infer_differently_fails_clearly(plane, tmp_path, batches, needle):
    w = BundleWritePlugin(plane)
    s = w.open_stream(CONF, PluginContext(task_id="t"))
    with pytest.raises(PluginError) as err:
        for b in batches:
            await s.write(b)
    msg = str(err.value)
    assert msg.startswith("bundleWrite: nothing written: ") and needle in msg, msg
    assert '"stream": false' in msg
    await s.abort()
    assert os.listdir(tmp_path / "out") == []
    # stream false writes the same rows with the whole-task inference
    r = await w.execute(b'{"dir": "out", "stream": false}', [o for b in batches for o in b],
                        PluginContext(task_id="t"))
    assert r.ok, r.message


@pytest.mark.parametrize("batches,needle", [
    ([out({"id": 1}), out({"id": 2}, {"id": 3, "bad name": 1})],
     "row 2 (output 2): field 'bad name' is not a plain SQL identifier"),
    ([out({"id": 1, "Val": 1}), out({"id": 2, "val": 2})],
     "row 1 (output 1): field 'val' differs from field 'Val' only in case"),
    ([out({"id": 1}), [b'[1]']], "output 1 item 0 is number"),
    ([out({"id": 1}), [b'{"id": ']], "output 1 is not valid JSON"),
])
async def test_bad_rows_in_a_later_batch_name_the_row_and_leave_nothing(plane, tmp_path, batches, needle):
    w = BundleWritePlugin(plane)
    s = w.open_stream(CONF, PluginContext(task_id="t"))
    with pytest.raises(PluginError) as err:
        for b in batches:
            await s.write(b)
    assert needle in str(err.value) and "nothing written" in str(err.value), str(err.value)
    await s.abort()
    assert os.listdir(tmp_path / "out") == []


@pytest.mark.parametrize("conf,needle", [
    (b'{"dir": "../x"}', "leaves the bundle root"),
    (b'{"dir": "o", "stream": 1}', "stream must be true or false"),
    (b'{"dir": "o", "keepOutputs": -1}', "keepOutputs must be an integer >= 0"),
    (b'{"dir": "o", "target": "x"}', "unknown config key(s) 'target'"),
])
def test_a_bad_config_is_refused_when_the_stream_opens(plane, conf, needle):
    with pytest.raises(PluginError) as err:
        BundleWritePlugin(plane).open_stream(conf, PluginContext(task_id="t"))
    assert str(err.value).startswith("bundleWrite: ") and needle in str(err.value), str(err.value)


async def test_the_spool_may_open_its_temporary_file_and_no_other(plane, tmp_path):
    secret = tmp_path / "secret.parquet"
    duckdb.connect().execute(f"COPY (SELECT 42 AS x) TO '{secret}' (FORMAT PARQUET)")
    spill = tmp_path / "spill"
    files = plane.files([str(tmp_path / "mine.parquet")], spill_dir=str(spill))
    try:
        cur = files.cursor()
        with pytest.raises(duckdb.Error):
            cur.execute(f"SELECT * FROM read_parquet('{secret}')").fetchall()
        with pytest.raises(duckdb.Error):
            cur.execute("SET temp_directory = '/tmp'")
        assert cur.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "64.0 MiB"
    finally:
        files.close()


async def test_the_spool_spills_past_the_memory_limit(tmp_path):
    plane = DataPlane({}, bundle_root=str(tmp_path), duckdb_memory_limit_mb=16)
    try:
        w = BundleWritePlugin(plane)
        s = w.open_stream(CONF, PluginContext(task_id="t"))
        spilled = 0
        for j in range(0, 400_000, 20_000):
            await s.write(out(*({"id": i, "s": f"a string of some length, row {i}"} for i in range(j, j + 20_000))))
            cur = s._spool.cur
            spilled = max(spilled, cur.execute("SELECT sum(temporary_storage_bytes) FROM duckdb_memory()").fetchone()[0])
            used = cur.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchone()[0]
            assert used <= 16 << 20, used
        assert spilled > 0
        r = await s.commit()
        assert r.ok, r.message
        assert parquet(tmp_path / "out" / "t.parquet")[1][-1] == (399_999, "a string of some length, row 399999")
        assert os.listdir(tmp_path / "out") == ["t.parquet"]
    finally:
        await plane.aclose()


async def test_a_write_over_the_io_timeout_fails_retryable_and_leaves_nothing(plane, tmp_path):
    w = BundleWritePlugin(plane)
    s = w.open_stream(CONF, PluginContext(task_id="t", io_timeout_ms=1))
    rows = out(*({"id": i, "x": i * 0.5, "s": f"row {i}"} for i in range(200_000)))
    with pytest.raises(PluginError) as err:
        await s.write(rows)
        await s.write(rows)
    assert err.value.retryable and "phaseIoTimeoutMs (1 ms)" in str(err.value), str(err.value)
    await s.abort()
    assert os.listdir(tmp_path / "out") == []


async def test_a_write_cancelled_mid_way_leaves_nothing(plane, tmp_path):
    w = BundleWritePlugin(plane)
    s = w.open_stream(CONF, PluginContext(task_id="t"))
    await s.write(out({"id": -1}))
    rows = out(*({"id": i, "x": i * 0.5, "s": f"row {i}"} for i in range(300_000)))
    task = asyncio.ensure_future(s.write(rows))
    while s._busy is None:                   # the batch's DuckDB statements are running
        await asyncio.sleep(0.001)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await s.abort()
    assert os.listdir(tmp_path / "out") == []
