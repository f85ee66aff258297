import orjson
import pytest

from blockx.plugins.writers.table_rows import BadRows, create_columns, parse_rows, prepare

COLS = {"id": "bigint", "a": "text", "b": "double precision"}


def test_outputs_to_rows_and_groups():
    rows = parse_rows([b'{"id": 1, "a": "x"}', b'[{"id": 2, "b": 1}, {"id": 1, "b": 2.5}]', b"[]"])
    assert [i for i, _ in rows] == [0, 1, 1]
    groups = prepare(rows, COLS, ["id"], "t")
    # id 1 merged in order (a from the first row, b from the third), id 2 alone
    assert dict(groups) == {("id", "a", "b"): [[1], ["x"], [2.5]], ("id", "b"): [[2], [1.0]]}


def test_many_rows_merge_with_tombstones_in_order():
    outs = [b'{"id": %d, "a": "v%d"}' % (i % 10, i) for i in range(100)]
    groups = prepare(parse_rows(outs), COLS, ["id"], "t")
    assert groups == [(("id", "a"), [list(range(10)), [f"v{90 + i}" for i in range(10)]])]


@pytest.mark.parametrize("outs,needle", [
    ([b"nope"], "output 0 is not valid JSON"),
    ([b'"s"'], "output 0 is string, expected a JSON object"),
    ([b'[{"id": 1}, 3]'], "output 0 item 1 is number"),
])
def test_bad_outputs(outs, needle):
    with pytest.raises(BadRows, match=needle):
        parse_rows(outs)


def test_bad_rows_name_the_row_and_field():
    rows = parse_rows([b'{"id": 1}', b'{"id": 2, "c": 1}'])
    with pytest.raises(BadRows, match=r"row 1 \(output 1\): unknown column 'c' \(table t has: id, a, b\)"):
        prepare(rows, COLS, ["id"], "t")


def test_create_columns_from_the_first_row():
    rows = parse_rows([b'{"id": 1, "a": null, "m": {"k": 1}}', b'{"id": 2, "a": 1.5}'])
    assert create_columns(rows, ["id"], True) == [("id", "BIGINT"), ("a", "DOUBLE PRECISION"), ("m", "JSONB")]
    assert create_columns(rows, ["id"], False)[2] == ("m", "JSON")
    with pytest.raises(BadRows, match="key field 'k' is missing"):
        create_columns(rows, ["k"], True)


@pytest.mark.parametrize("field", ['v" BIGINT); DROP TABLE victim; --', 'a"b', "a;b", "a--b", "a(b", "v\n"])
def test_create_columns_refuses_a_field_name_that_is_not_an_identifier(field):
    rows = parse_rows([orjson.dumps({"id": 1, field: 2})])
    with pytest.raises(BadRows) as ei:
        create_columns(rows, ["id"], True)
    assert f"row 0 (output 0): field {field!r} is not a plain SQL identifier" in str(ei.value)


def test_create_columns_refuses_names_differing_only_in_case():
    with pytest.raises(BadRows, match="differ only in case"):
        create_columns(parse_rows([b'{"id": 1, "v": 1, "V": 2}']), ["id"], False)


def test_prepare_refuses_a_bad_field_name_by_row_and_field():
    rows = parse_rows([b'{"id": 1}', b'[{"id": 2}, {"id": 3, "a\\"b": 1}]'])
    with pytest.raises(BadRows) as ei:
        prepare(rows, {"id": "bigint", 'a"b': "bigint"}, ["id"], "t")
    assert "row 2 (output 1): field 'a\"b' is not a plain SQL identifier" in str(ei.value)
