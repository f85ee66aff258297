"""row_mixed(row) -> a row whose fields change type along the call list: "w" null,
int or float; "nested.f" null before id 1000, then a float; "v" a number, or a
string where x is -3 (and a raise where x is -1, a 30 s sleep where x is -2)."""
import time


def main(row):
    i, x = row["id"], row["x"]
    if x == -1:
        raise ValueError(f"row {i} refused")
    if x == -2:
        time.sleep(30)
    w = None if i % 7 == 0 else (i if i % 2 else i * 0.5)
    return {"id": i, "v": "text" if x == -3 else x * 2, "w": w,
            "nested": {"k": i, "f": None if i < 1000 else 1.5}}
