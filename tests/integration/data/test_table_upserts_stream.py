"""tableUpserts streamed: one transaction across many writes, visible only at
commit, nothing left after an abort or a bad row, against both databases."""

from __future__ import annotations

import orjson
import pytest

from blockx.plugins.plugin_api import PluginError
from blockx.plugins.writers.table_upserts import TableUpsertsPlugin


def cfg(table, **kw) -> bytes:
    return orjson.dumps({"target": "main", "table": table, "key": ["id"], **kw})


def out(*values) -> list[bytes]:
    return [orjson.dumps(v) for v in values]


async def _count(db, table) -> int | None:
    try:
        return (await db.rows(f"SELECT count(*) FROM {table}"))[0][0]
    except Exception:  # noqa: BLE001 - the table does not exist
        return None


async def test_writes_become_visible_only_at_commit(db, table):
    w = TableUpsertsPlugin(db.plane)
    s = w.open_stream(cfg(table, createTable=True))
    await s.write(out(*({"id": i, "v": i} for i in range(100))))
    await s.write(out(*({"id": i, "v": -i} for i in range(100, 250))))
    assert not await _count(db, table)            # no table or no row outside the transaction
    r = await s.commit()
    assert r.ok, r.message
    assert orjson.loads(r.details)["rows"] == 250
    assert await _count(db, table) == 250
    await s.abort()                               # after the commit: nothing undone
    assert await _count(db, table) == 250


async def test_a_key_met_again_in_a_later_write_ends_as_if_merged(db, table):
    await db.exec(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, name TEXT, score DOUBLE PRECISION)")
    w = TableUpsertsPlugin(db.plane)
    s = w.open_stream(cfg(table))
    await s.write(out({"id": 7, "name": "x", "score": 1}))
    await s.write(out({"id": 7, "name": "y"}))
    assert (await s.commit()).ok
    assert await db.rows(f"SELECT id, name, score FROM {table}") == [(7, "y", 1.0)]


async def test_abort_leaves_nothing(db, table):
    await db.exec(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v BIGINT)")
    await db.exec(f"INSERT INTO {table} VALUES (1, 1)")
    w = TableUpsertsPlugin(db.plane)
    s = w.open_stream(cfg(table))
    await s.write(out(*({"id": i, "v": 100} for i in range(50))))
    await s.abort()
    assert await db.rows(f"SELECT id, v FROM {table}") == [(1, 1)]
    # the source is usable at once: the next task writes
    s2 = w.open_stream(cfg(table))
    await s2.write(out({"id": 2, "v": 2}))
    assert (await s2.commit()).ok
    assert await _count(db, table) == 2


async def test_a_bad_row_in_a_later_write_names_its_task_row_and_output(db, table):
    await db.exec(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v BIGINT)")
    w = TableUpsertsPlugin(db.plane)
    s = w.open_stream(cfg(table))
    await s.write(out({"id": 1, "v": 1}, [{"id": 2, "v": 2}, {"id": 3, "v": 3}]))
    with pytest.raises(PluginError, match=r"row 4 \(output 3\), field 'v': expected an integer"):
        await s.write(out({"id": 4, "v": 4}, {"id": 5, "v": "five"}))
    await s.abort()
    assert await _count(db, table) == 0


async def test_a_bad_config_is_refused_when_the_stream_opens(db, table):
    w = TableUpsertsPlugin(db.plane)
    with pytest.raises(PluginError, match="keepOutputs must be an integer >= 0"):
        w.open_stream(cfg(table, keepOutputs=-1))
    with pytest.raises(PluginError, match="unknown config key"):
        w.open_stream(cfg(table, colour=1))
    with pytest.raises(PluginError, match="unknown data source 'nowhere'"):
        w.open_stream(orjson.dumps({"target": "nowhere", "table": table, "key": ["id"]}))


async def test_stream_keys_are_accepted_by_the_writer_after_the_calls_phase(db, table):
    w = TableUpsertsPlugin(db.plane)
    r = await w.execute(cfg(table, createTable=True, stream=False, keepOutputs=5), out({"id": 1}))
    assert r.ok, r.message
    r = await w.execute(cfg(table, stream="no"), out({"id": 1}))
    assert not r.ok and "stream must be true or false" in r.message
