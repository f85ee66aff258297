"""The data-plane suites run against both real databases: an embedded DuckDB file
in a temporary directory, and a throwaway PostgreSQL cluster (session-scoped,
started with initdb + pg_ctl as an unprivileged user). Nothing is mocked."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from blockx.plugins.data.plane import DataPlane


class Db:
    """One source under test, named `main` in its DataPlane, plus direct SQL for
    setting up and checking tables."""

    def __init__(self, kind: str, plane: DataPlane, dsn: str = ""):
        self.kind = kind
        self.plane = plane
        self.dsn = dsn
        self.source = plane.source("main")

    async def exec(self, sql: str, *args) -> None:
        if self.kind == "duckdb":
            cur = self.source.cursor()
            try:
                cur.execute(sql, list(args))
            finally:
                cur.close()
        else:
            conn = await asyncpg.connect(self.dsn)
            try:
                await conn.execute(sql, *args)
            finally:
                await conn.close()

    async def rows(self, sql: str, *args) -> list[tuple]:
        if self.kind == "duckdb":
            cur = self.source.cursor()
            try:
                return cur.execute(sql, list(args)).fetchall()
            finally:
                cur.close()
        conn = await asyncpg.connect(self.dsn)
        try:
            return [tuple(r) for r in await conn.fetch(sql, *args)]
        finally:
            await conn.close()

    async def pg_activity(self) -> int:
        """Other sessions of this Worker still open on the server (PostgreSQL only)."""
        r = await self.rows("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'blockx-worker' "
                            "AND state <> 'idle'")
        return r[0][0]


@pytest.fixture(params=["duckdb", "postgresql"])
async def db(request, tmp_path):
    if request.param == "duckdb":
        plane = DataPlane({"main": f"duckdb://{tmp_path}/main.duckdb"}, bundle_root=str(tmp_path / "bundles"),
                          statement_timeout_ms=5000)
        d = Db("duckdb", plane)
    else:
        pg = request.getfixturevalue("postgres_server")
        plane = DataPlane({"main": pg.dsn}, bundle_root=str(tmp_path / "bundles"), statement_timeout_ms=5000)
        d = Db("postgresql", plane, pg.dsn)
    try:
        yield d
    finally:
        await plane.aclose()


@pytest.fixture
def table() -> str:
    return "t_" + uuid.uuid4().hex[:12]
