"""row_out(row) -> {"id": row["id"], "v": row["x"] * 2}: a bundle row to a table row."""


def main(row):
    return {"id": row["id"], "v": row["x"] * 2}
