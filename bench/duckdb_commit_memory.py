"""What DuckDB memory limit a tableUpserts of N new keys needs, and its peak RSS.

    .venv/bin/python bench/duckdb_commit_memory.py --rows 10000000 --limits 128,144,160 --ways one,staged

For each way and limit (MiB), in a fresh process: a DuckDB file database opened
as the Worker opens a DuckDB source (memory_limit, allocator background
threads), `--rows` new keys of `t (id BIGINT PRIMARY KEY, v BIGINT)` upserted in
batches of `--batch` exactly as tableUpserts does (a temporary table per batch,
INSERT ... ON CONFLICT DO UPDATE), then committed, through the Worker's own
upsert classes. `one`: into the table created empty beforehand, one transaction
takes every batch (DuckUpsert: how the Worker writes a table that exists);
`staged`: the table created by the upsert (createTable), built aside under a
staging name, a transaction per batch, renamed at the commit (DuckStagedUpsert).
Prints per limit whether the commit went through, DuckDB's own memory just before
it (duckdb_memory(): the key index, the transaction's rows in memory and spilled),
the process's peak RSS (VmHWM) and its RSS a second after. The process alone, not
a Worker: add the Worker's own RSS (about 120 MB idle) for a Worker's figure."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) // 1024
    return 0


def child(way: str, rows: int, batch: int, limit_mb: int, path: str) -> dict:
    import asyncio
    import pathlib

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    from blockx.plugins.data.duck import DuckSource

    out: dict = {"way": way, "limit_mib": limit_mb, "rows": rows}

    def sql(src: DuckSource, text: str) -> list:
        cur = src.cursor()
        try:
            return cur.execute(text).fetchall()
        finally:
            cur.close()

    async def run() -> None:
        src = DuckSource("bench", path, memory_limit_mb=limit_mb)
        cols = [("id", "BIGINT"), ("v", "BIGINT")]
        if way == "one":
            sql(src, "CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT)")
            tx = src.open_upsert(None, "t", ["id"])
        else:
            tx = src.open_upsert(None, "t", ["id"], create=cols)
        t0 = time.monotonic()
        try:
            for lo in range(0, rows, batch):
                ids = list(range(lo, min(rows, lo + batch)))
                await tx.write([(("id", "v"), [ids, ids])])
            out["before_commit_mib"] = {tag: [used >> 20, spilled >> 20] for tag, used, spilled in sql(
                src, "SELECT tag, memory_usage_bytes, temporary_storage_bytes FROM duckdb_memory() "
                     "WHERE memory_usage_bytes > 0 OR temporary_storage_bytes > 0")}
            await tx.commit()
            out["result"] = "committed"
        except Exception as exc:  # noqa: BLE001 - reported
            out.update(result="failed", error=" ".join(str(exc).split("Possible solutions")[0].split())[:300])
            await tx.rollback()
        out["seconds"] = round(time.monotonic() - t0, 1)
        out["peak_rss_mb"] = _status("VmHWM")
        await asyncio.sleep(1.0)
        out["rss_after_mb"] = _status("VmRSS")
        src.close()

    asyncio.run(run())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--limits", default="128,144,160", help="memory limits to try, MiB, comma-separated")
    ap.add_argument("--ways", default="one,staged", help="one (one transaction), staged (built aside), or both")
    ap.add_argument("--way", default="one", help=argparse.SUPPRESS)
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--path", default="", help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.child:
        print(json.dumps(child(ns.way, ns.rows, ns.batch, ns.child, ns.path)))
        return
    for way, limit in ((w, int(x)) for w in ns.ways.split(",") for x in ns.limits.split(",")):
        base = tempfile.mkdtemp(prefix="blockx-duck-commit-")
        try:
            run = subprocess.run([sys.executable, __file__, "--rows", str(ns.rows), "--batch", str(ns.batch),
                                  "--way", way, "--child", str(limit), "--path", os.path.join(base, "t.duckdb")],
                                 capture_output=True, text=True, check=False)
            lines = run.stdout.strip().splitlines()
            print(lines[-1] if lines else json.dumps({"way": way, "limit_mib": limit, "error": run.stderr[-2000:]}), flush=True)
        finally:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
