"""row_of(i) -> {"id": i, "v": (i + 100) * 2}: an integer of a rangeScan to a table row."""


def main(i):
    return {"id": i, "v": (i + 100) * 2}
