"""dataPlane.duckdbMemoryLimitMb: a DuckDB file source's buffer pool inside the
Worker is bounded (DuckDB evicts and spills past it), so a long streamed upsert
does not grow the Worker with its table."""

from __future__ import annotations

from blockx.app.config import DataPlaneSection
from blockx.plugins.data.duck import DuckSource
from blockx.plugins.data.urls import MEMORY


def _limit(src: DuckSource) -> str:
    cur = src.cursor()
    try:
        return cur.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    finally:
        cur.close()


def test_a_file_source_gets_the_configured_memory_limit(tmp_path):
    src = DuckSource("local", str(tmp_path / "a.duckdb"), memory_limit_mb=64)
    try:
        assert _limit(src) in ("64.0 MiB", "64.0MiB", "67.1 MB", "67.1MB"), _limit(src)
    finally:
        src.close()


def test_zero_and_in_memory_sources_keep_duckdbs_own_limit(tmp_path):
    own = DuckSource("x", str(tmp_path / "b.duckdb"))
    mem = DuckSource("m", MEMORY, memory_limit_mb=64)
    try:
        assert _limit(own) == _limit(mem) and "64" not in _limit(own)
    finally:
        own.close()
        mem.close()


def test_the_default_is_128_mib():
    assert DataPlaneSection().duckdb_memory_limit_mb == 128


def _setting(src: DuckSource, name: str):
    cur = src.cursor()
    try:
        return cur.execute("SELECT current_setting($1)", [name]).fetchone()[0]
    finally:
        cur.close()


def test_sources_hand_freed_memory_back_in_the_background(tmp_path):
    # DuckDB's allocator keeps what a large write freed unless its background
    # threads purge it: the Worker's RSS would stay up after the task.
    from blockx.plugins.data.duck import bundle_files
    file_src = DuckSource("local", str(tmp_path / "c.duckdb"), memory_limit_mb=64)
    private = bundle_files([str(tmp_path / "x.parquet")], spill_dir=str(tmp_path / "spill"), memory_limit_mb=32)
    try:
        assert _setting(file_src, "allocator_background_threads") is True
        assert _setting(private, "allocator_background_threads") is True
    finally:
        file_src.close()
        private.close()
