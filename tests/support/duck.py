"""Direct SQL on a DuckSource for tests: set-up and checks, outside any task."""
from __future__ import annotations


def duck_rows(src, sql: str) -> list[tuple]:
    """Run one statement on its own cursor of `src` (a DuckSource); its rows."""
    cur = src.cursor()
    try:
        return cur.execute(sql).fetchall()
    finally:
        cur.close()
