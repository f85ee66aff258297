"""Top entries of a cProfile dump (the worker run under `-m cProfile -o FILE`)."""
from __future__ import annotations

import io
import pstats

from bench.e2e.harness import ROOT


def _where(func: tuple[str, int, str]) -> str:
    path, line, name = func
    root = str(ROOT) + "/"
    if path.startswith(root):
        path = path[len(root):]
    elif "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    return f"{path}:{line}({name})" if line else name


def top_entries(path: str, n: int = 25) -> dict:
    """{"total_s", "by_tottime": [...], "by_cumtime": [...]} with ncalls and times."""
    st = pstats.Stats(path, stream=io.StringIO())
    rows = []
    for func, (cc, nc, tt, ct, _callers) in st.stats.items():
        rows.append({"func": _where(func), "ncalls": nc, "tottime_s": round(tt, 4), "cumtime_s": round(ct, 4)})
    by_tt = sorted(rows, key=lambda r: r["tottime_s"], reverse=True)[:n]
    by_ct = sorted(rows, key=lambda r: r["cumtime_s"], reverse=True)[:n]
    return {"file": path, "total_tt_s": round(st.total_tt, 3), "by_tottime": by_tt, "by_cumtime": by_ct}


def format_table(summary: dict) -> str:
    out = [f"profile {summary['file']} (total {summary['total_tt_s']} s)"]
    for key in ("by_tottime", "by_cumtime"):
        out.append(f"  -- {key}")
        out.append(f"  {'ncalls':>9} {'tottime':>8} {'cumtime':>8}  function")
        for r in summary[key]:
            out.append(f"  {r['ncalls']:>9} {r['tottime_s']:>8.3f} {r['cumtime_s']:>8.3f}  {r['func']}")
    return "\n".join(out)
