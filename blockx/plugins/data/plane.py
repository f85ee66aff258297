"""DataPlane: the Worker's named data sources and the filesystem roots that bundles
may be read from and written to. Builders, writers and the `sql` IO backend get
it at construction; payloads and writer configs only ever carry a source NAME.

With no `dataSources` configured, a `local` DuckDB file under the state
directory is the default, so the bundle tour needs no database server. Sources
open on first use and close with the Worker."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from blockx.core.config_rules import Rule
from blockx.plugins.data.duck import DuckSource, bundle_files
from blockx.plugins.data.errors import DataSourceError, UnknownDataSource
from blockx.plugins.data.pg import PgSource
from blockx.plugins.data.urls import DUCKDB, parse_source_url

LOCAL = "local"
# The rules of the dataPlane settings a DataPlane is built from.
DATA_PLANE_RULES = (Rule("scan_fetch_rows", 1, 1_000_000), Rule("scan_max_row_bytes", 1),
                    Rule("bundle_max_files", 1), Rule("duckdb_memory_limit_mb", 0, note="0 = DuckDB's own"),
                    Rule("duckdb_idle_close_ms", 0, note="0 = never"))


def default_sources(state_dir: str) -> dict[str, str]:
    return {LOCAL: "duckdb://" + os.path.join(os.path.abspath(state_dir), "local.duckdb")}


def default_source_problem(sources: Mapping[str, str], state_dir: str, setting: str) -> str | None:
    """The rule of dataPlane.stateDir (named `setting`): with no sources it holds the default one."""
    if not sources and not state_dir:
        return (f"{setting} must not be empty when no dataSources are configured "
                "(it holds the default `local` DuckDB file)")
    return None


class DataPlane:
    def __init__(self, sources: Mapping[str, str], *, bundle_root: str = "", statement_timeout_ms: int = 10_000,
                 scan_fetch_rows: int = 1_000, scan_max_row_bytes: int = 4 * 1024 * 1024,
                 bundle_max_files: int = 100_000, duckdb_memory_limit_mb: int = 0, duckdb_idle_close_ms: int = 0):
        self._sources: dict[str, Any] = {}
        for name, url in sources.items():
            u = parse_source_url(name, url)
            if u.kind == DUCKDB:
                self._sources[name] = DuckSource(name, u.target, statement_timeout_ms=statement_timeout_ms,
                                                 memory_limit_mb=duckdb_memory_limit_mb,
                                                 idle_close_ms=duckdb_idle_close_ms)
            else:
                self._sources[name] = PgSource(name, u.target, statement_timeout_ms=statement_timeout_ms)
        self.bundle_root = os.path.realpath(bundle_root) if bundle_root else ""
        self.scan_fetch_rows = scan_fetch_rows
        self.scan_max_row_bytes = scan_max_row_bytes
        self.bundle_max_files = bundle_max_files
        self.duckdb_memory_limit_mb = duckdb_memory_limit_mb
        self.duckdb_idle_close_ms = duckdb_idle_close_ms

    @classmethod
    def from_config(cls, cfg) -> DataPlane:
        dp = cfg.data_plane
        sources = dict(cfg.data_sources) or default_sources(dp.state_dir)
        return cls(sources, bundle_root=dp.bundle_root or os.path.join(dp.state_dir, "bundles"),
                   statement_timeout_ms=cfg.phase_io_timeout_ms, scan_fetch_rows=dp.scan_fetch_rows,
                   scan_max_row_bytes=dp.scan_max_row_bytes, bundle_max_files=dp.bundle_max_files,
                   duckdb_memory_limit_mb=dp.duckdb_memory_limit_mb, duckdb_idle_close_ms=dp.duckdb_idle_close_ms)

    def names(self) -> list[str]:
        return sorted(self._sources)

    def source(self, name: object, what: str = "source"):
        """The source called `name`; UnknownDataSource listing the configured names."""
        src = self._sources.get(name) if isinstance(name, str) else None
        if src is None:
            known = ", ".join(self.names()) or "none"
            if not isinstance(name, str) or not name:
                raise UnknownDataSource(f"{what} must name a data source (configured: {known})")
            raise UnknownDataSource(f"unknown data source {name!r} (configured: {known})")
        return src

    def bundle_path(self, relative: object, what: str = "path") -> str:
        """An absolute path under the bundle root, from a payload's relative path
        (absolute paths and '..' that leave the root are refused)."""
        if not isinstance(relative, str) or not relative.strip():
            raise DataSourceError(f"{what} must be a non-empty string relative to the bundle root")
        if not self.bundle_root:
            raise DataSourceError("no bundle root is configured (dataPlane.bundleRoot)")
        if os.path.isabs(relative):
            raise DataSourceError(f"{what} {relative!r} must be relative to the bundle root, not absolute")
        full = os.path.realpath(os.path.join(self.bundle_root, relative))
        if full != self.bundle_root and not full.startswith(self.bundle_root + os.sep):
            raise DataSourceError(f"{what} {relative!r} leaves the bundle root")
        return full

    def files(self, paths: list[str], *, spill_dir: str | None = None) -> DuckSource:
        """A private DuckDB for one bundle operation that may open exactly `paths`
        (the files a builder matched, or a writer's temporary file) and no other;
        with `spill_dir`, bounded by dataPlane.duckdbMemoryLimitMb and spilling
        its tables there (a streamed bundleWrite's spool)."""
        return bundle_files(paths, spill_dir=spill_dir, memory_limit_mb=self.duckdb_memory_limit_mb)

    def close_idle(self, now: float) -> list[str]:
        """Close the DuckDB sources idle for dataPlane.duckdbIdleCloseMs (`now`:
        time.monotonic()); their names. Takes milliseconds a source: run it in a thread."""
        return [name for name, src in self._sources.items()
                if isinstance(src, DuckSource) and src.close_if_idle(now)]

    async def aclose(self) -> None:
        for src in list(self._sources.values()):
            try:
                await src.aclose()
            except Exception:  # noqa: BLE001 - closing at shutdown must go on
                pass

    close = aclose
