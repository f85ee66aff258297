"""The caller's W3C trace context as the metadata gives it: a valid traceparent
(and its tracestate) is kept, anything malformed is dropped whole (a new root,
never an error)."""
import pytest

from blockx.adapters.telemetry.trace_context import MAX_TRACESTATE_CHARS, incoming, valid_traceparent

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_valid_traceparent_and_its_tracestate_are_kept():
    md = (("authorization", "Bearer x"), ("traceparent", TP), ("tracestate", "a=1,b=2"))
    assert incoming(md) == (("traceparent", TP), ("tracestate", "a=1,b=2"))
    assert incoming((("traceparent", TP),)) == (("traceparent", TP),)


@pytest.mark.parametrize("value", [
    "", "garbage", TP.upper(), TP[:-1], TP + "-", TP.replace("-", "_"),
    "ff" + TP[2:],                                        # version ff is invalid
    "00-" + "0" * 32 + "-00f067aa0ba902b7-01",            # all-zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",   # all-zero span id
    TP + "-extra",                                        # version 00 has exactly four fields
    "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",   # not hex
])
def test_a_malformed_traceparent_is_dropped_with_its_tracestate(value):
    assert not valid_traceparent(value)
    assert incoming((("traceparent", value), ("tracestate", "a=1"))) is None


def test_a_later_version_may_carry_more_fields():
    assert valid_traceparent("01" + TP[2:] + "-future")
    assert not valid_traceparent("01" + TP[2:] + "future")


def test_two_traceparents_are_ambiguous_and_none_is_used():
    other = TP.replace("4bf9", "5bf9")
    assert incoming((("traceparent", TP), ("traceparent", other))) is None


def test_no_traceparent_is_none_even_with_a_tracestate():
    assert incoming((("tracestate", "a=1"),)) is None
    assert incoming(()) is None and incoming(None) is None


def test_an_oversized_tracestate_is_dropped_and_the_traceparent_kept():
    big = "a=" + "x" * MAX_TRACESTATE_CHARS
    assert incoming((("traceparent", TP), ("tracestate", big))) == (("traceparent", TP),)


def test_repeated_tracestate_headers_are_joined():
    md = (("traceparent", TP), ("tracestate", "a=1"), ("tracestate", "b=2"))
    assert incoming(md) == (("traceparent", TP), ("tracestate", "a=1,b=2"))
