"""row_gate(row) -> {"id": row["id"], "v": row["x"] * 2}; a row whose x is -1 raises
(a failing call), one whose x is -2 sleeps 30 s (a task that times out first)."""
import time


def main(row):
    x = row["x"]
    if x == -1:
        raise ValueError(f"row {row['id']} refused")
    if x == -2:
        time.sleep(30)
    return {"id": row["id"], "v": x * 2}
