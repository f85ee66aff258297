"""row_v(row) -> {"id": row["id"], "v": row["x"] + 1}: the bundle pipeline's trivial function."""


def main(row):
    return {"id": row["id"], "v": row["x"] + 1}
