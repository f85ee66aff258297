import datetime
import decimal

import pytest

from blockx.plugins.data.values import (BOOLEAN, INTEGER, JSON, NUMBER, OTHER, TEXT, BadValue, coerce, dumps,
                                        family, row_column_args, row_object_args)


def test_rows_become_canonical_json():
    assert row_object_args(("x", "a"), (1, "s")) == b'[{"a":"s","x":1}]'
    assert row_column_args((1, None, True)) == b"[1,null,true]"
    assert dumps([decimal.Decimal("2"), decimal.Decimal("1.5"), b"\x01\xff", datetime.date(2026, 11, 30),
                  datetime.timedelta(seconds=90)]) == b'[2,1.5,"01ff","2026-11-30",90.0]'


@pytest.mark.parametrize("type_name,fam", [
    ("bigint", (INTEGER, 63)), ("INTEGER", (INTEGER, 31)), ("smallint", (INTEGER, 15)),
    ("double precision", (NUMBER, 0)), ("DOUBLE", (NUMBER, 0)), ("numeric(10,2)", (NUMBER, -1)),
    ("DECIMAL(18,3)", (NUMBER, -1)), ("boolean", (BOOLEAN, 0)), ("text", (TEXT, 0)),
    ("character varying(20)", (TEXT, 0)), ("VARCHAR", (TEXT, 0)), ("jsonb", (JSON, 0)),
    ("date", (OTHER, 0)), ("timestamp with time zone", (OTHER, 0)), ("interval", (OTHER, 0)),
])
def test_families(type_name, fam):
    assert family(type_name) == fam


def test_coerce_accepts_and_refuses():
    assert coerce(INTEGER, 31, 5) == 5 and coerce(NUMBER, 0, 2) == 2.0 and coerce(NUMBER, -1, 2) == 2
    assert coerce(JSON, 0, {"a": [1]}) == '{"a":[1]}' and coerce(OTHER, 0, True) == "true"
    assert coerce(TEXT, 0, None) is None
    for fam, bits, value, needle in ((INTEGER, 31, True, "expected an integer, got boolean"),
                                     (INTEGER, 15, 40000, "does not fit"), (NUMBER, 0, "1", "expected a number"),
                                     (BOOLEAN, 0, 0, "expected a boolean"), (TEXT, 0, 1, "expected a string"),
                                     (OTHER, 0, [1], "expected a scalar")):
        with pytest.raises(BadValue, match=needle):
            coerce(fam, bits, value)
