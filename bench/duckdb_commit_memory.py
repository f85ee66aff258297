"""What DuckDB memory limit a one-transaction tableUpserts of N new keys needs.

    .venv/bin/python bench/duckdb_commit_memory.py --rows 10000000 --limits 128,144,160

For each limit (MiB), in a fresh process: a DuckDB file database opened as the
Worker opens a DuckDB source (memory_limit, allocator background threads), one
transaction that creates `t (id BIGINT PRIMARY KEY, v BIGINT)` and upserts
`--rows` new keys in batches of `--batch` exactly as tableUpserts does (a
temporary table per batch, INSERT ... ON CONFLICT DO UPDATE), then COMMIT.
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


def child(rows: int, batch: int, limit_mb: int, path: str) -> dict:
    import duckdb

    con = duckdb.connect(path, config={"memory_limit": f"{limit_mb}MiB", "allocator_background_threads": True})
    cur = con.cursor()
    cur.execute("BEGIN TRANSACTION")
    cur.execute("CREATE TABLE t (id BIGINT, v BIGINT, PRIMARY KEY (id))")
    t0 = time.monotonic()
    out: dict = {"limit_mib": limit_mb, "rows": rows}
    try:
        for lo in range(0, rows, batch):
            ids = list(range(lo, min(rows, lo + batch)))
            cur.execute("CREATE TEMP TABLE s AS SELECT id, v FROM t LIMIT 0")
            cur.execute("INSERT INTO s SELECT UNNEST($1), UNNEST($2)", [ids, ids])
            cur.execute("INSERT INTO t SELECT id, v FROM s ON CONFLICT (id) DO UPDATE SET v = excluded.v")
            cur.execute("DROP TABLE s")
    except duckdb.Error as exc:
        out.update(result="write failed", error=" ".join(str(exc).split("Possible solutions")[0].split()))
        return out
    out["before_commit_mib"] = {tag: [used >> 20, spilled >> 20] for tag, used, spilled in cur.execute(
        "SELECT tag, memory_usage_bytes, temporary_storage_bytes FROM duckdb_memory() "
        "WHERE memory_usage_bytes > 0 OR temporary_storage_bytes > 0").fetchall()}
    try:
        cur.execute("COMMIT")
        out["result"] = "committed"
    except duckdb.Error as exc:
        out.update(result="commit failed", error=" ".join(str(exc).split("Possible solutions")[0].split()))
    out["seconds"] = round(time.monotonic() - t0, 1)
    out["peak_rss_mb"] = _status("VmHWM")
    time.sleep(1.0)
    out["rss_after_mb"] = _status("VmRSS")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--limits", default="128,144,160", help="memory limits to try, MiB, comma-separated")
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--path", default="", help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.child:
        print(json.dumps(child(ns.rows, ns.batch, ns.child, ns.path)))
        return
    for limit in (int(x) for x in ns.limits.split(",")):
        base = tempfile.mkdtemp(prefix="blockx-duck-commit-")
        try:
            run = subprocess.run([sys.executable, __file__, "--rows", str(ns.rows), "--batch", str(ns.batch),
                                  "--child", str(limit), "--path", os.path.join(base, "t.duckdb")],
                                 capture_output=True, text=True, check=False)
            lines = run.stdout.strip().splitlines()
            print(lines[-1] if lines else json.dumps({"limit_mib": limit, "error": run.stderr[-2000:]}), flush=True)
        finally:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
