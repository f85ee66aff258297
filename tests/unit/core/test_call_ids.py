"""The task a call id belongs to, read exactly even when task ids hold "/"."""
import pytest

from blockx.core.call_ids import task_id_of_call


@pytest.mark.parametrize("call_id, task_id", [
    ("t/0", "t"), ("t/3.17", "t"), ("t/0/sub-1", "t"), ("t/0/sub-1/sub-2", "t"),
    ("a/0/0", "a/0"), ("a/0/1.4", "a/0"), ("a/0/0/sub-1", "a/0"), ("a/0/sub-3", "a"),
    ("a/b/c/7", "a/b/c"), ("x/sub-1/0", "x/sub-1"),
])
def test_the_task_of_a_call(call_id, task_id):
    assert task_id_of_call(call_id) == task_id


@pytest.mark.parametrize("call_id", ["", "t", "/0", "t/sub-1"[:0] + "/sub-1"])
def test_strings_that_are_no_call_id_belong_to_no_task(call_id):
    assert task_id_of_call(call_id) is None
