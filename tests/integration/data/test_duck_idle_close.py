"""A DuckDB file source that no operation has used for dataPlane.duckdbIdleCloseMs
closes its instance, handing back the blocks DuckDB's buffer pool kept (after a
10M-row write, about 50 MB that stayed for as long as the source was open), and
the next use opens the file again with everything committed. A source with a
scan or a write transaction open is in use and never closes under it; an
in-memory source never closes (its data would go)."""

from __future__ import annotations

import asyncio
import time

from blockx.app.idle_sources import IdleSources
from blockx.plugins.data.duck import DuckSource
from blockx.plugins.data.plane import DataPlane
from blockx.plugins.data.urls import MEMORY

COLS = [("id", "BIGINT"), ("v", "BIGINT")]


async def _fill(src: DuckSource, n: int = 10) -> None:
    ids = list(range(n))
    assert await src.upsert(None, "t", ["id"], [(("id", "v"), [ids, ids])], create=COLS) == n


async def test_an_idle_source_closes_and_reopens_with_its_data(tmp_path):
    src = DuckSource("local", str(tmp_path / "a.duckdb"), idle_close_ms=1000)
    try:
        await _fill(src)
        assert src.is_open
        assert not src.close_if_idle(time.monotonic())           # used just now
        assert src.close_if_idle(time.monotonic() + 1.5)
        assert not src.is_open
        cols, rows = await src.fetch_rows("SELECT count(*) FROM t", [], 1)
        assert rows == [(10,)] and src.is_open                   # opened again, with what was committed
    finally:
        src.close()


async def test_a_source_with_a_scan_or_a_transaction_open_stays_open(tmp_path):
    src = DuckSource("local", str(tmp_path / "a.duckdb"), idle_close_ms=1000)
    later = lambda: time.monotonic() + 100  # noqa: E731
    try:
        await _fill(src, 5000)
        scan = await src.open_scan("SELECT id FROM t ORDER BY id", [])
        assert len(await scan.fetch(10)) == 10
        assert not src.close_if_idle(later())                    # a scan is open
        assert len(await scan.fetch(10)) == 10                   # and goes on reading
        scan.close()
        tx = src.open_upsert(None, "t", ["id"])
        await tx.write([(("id", "v"), [[1], [-1]])])
        assert not src.close_if_idle(later())                    # a transaction is open
        await tx.commit()
        staged = src.open_upsert(None, "u", ["id"], create=COLS)
        await staged.write([(("id", "v"), [[1], [1]])])
        assert not src.close_if_idle(later())                    # a table being built aside
        await staged.rollback()
        assert src.close_if_idle(later())
        cols, rows = await src.fetch_rows("SELECT v FROM t WHERE id = 1", [], 1)
        assert rows == [(-1,)]
    finally:
        src.close()


async def test_a_failed_or_cancelled_operation_does_not_keep_the_source_open(tmp_path):
    src = DuckSource("local", str(tmp_path / "a.duckdb"), idle_close_ms=1000)
    try:
        await _fill(src)
        try:
            await src.fetch_rows("SELECT nope FROM t", [], 1)
        except Exception:  # noqa: BLE001 - the failure is the point
            pass
        task = asyncio.ensure_future(src.fetch_rows(
            "SELECT count(*) FROM range(100000000) a, range(100) b", [], 1))
        await asyncio.sleep(0.2)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for _ in range(100):                                     # the interrupted query's cursor goes
            if src.close_if_idle(time.monotonic() + 100):        # once its thread has returned
                break
            await asyncio.sleep(0.05)
        assert not src.is_open
    finally:
        src.close()


async def test_an_in_memory_source_or_a_zero_setting_never_closes(tmp_path):
    mem = DuckSource("mem", MEMORY, idle_close_ms=1000)
    kept = DuckSource("kept", str(tmp_path / "k.duckdb"), idle_close_ms=0)
    try:
        for src in (mem, kept):
            await _fill(src)
            assert not src.close_if_idle(time.monotonic() + 100)
            assert src.is_open
    finally:
        mem.close()
        kept.close()


async def test_the_worker_loop_closes_idle_sources(tmp_path):
    plane = DataPlane({"local": "duckdb://" + str(tmp_path / "a.duckdb"), "mem": "duckdb://:memory:"},
                      duckdb_idle_close_ms=200)
    loop = IdleSources(plane, 200)
    loop.start()
    try:
        local, mem = plane.source("local"), plane.source("mem")
        await _fill(local)
        await _fill(mem)
        deadline = time.monotonic() + 10
        while local.is_open and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not local.is_open and mem.is_open
        cols, rows = await local.fetch_rows("SELECT count(*) FROM t", [], 1)
        assert rows == [(10,)]
    finally:
        await loop.stop()
        await plane.aclose()
