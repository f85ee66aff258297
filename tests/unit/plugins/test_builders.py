import itertools

import orjson
import pytest

from blockx._fast import implementations
from blockx.plugins.builder_api import (BuildContext, BuilderError, CallBuilder, CallSpec, StreamingCallBuilder,
                                        batch_specs, canonical_args_json, is_streaming)
from blockx.plugins.builders import KNOWN_BUILDERS, BuilderRegistry
from blockx.plugins.builders.call_list import CallListBuilder
from blockx.plugins.data.plane import DataPlane
from blockx.plugins.builders.payload import PayloadBuilder
from blockx.plugins.builders.range_scan import MAX_EAGER_CALLS, RangeScanBuilder
from blockx.plugins.builders.static import StaticBuilder

CTX = BuildContext(task_id="t1")


def j(obj) -> bytes:
    return orjson.dumps(obj)


def test_canonical_args_matches_the_shared_definition():
    for _label, mod in implementations("cachekey"):
        args = [{"b": 1, "a": [2, {"d": 0, "c": None}]}, "x", 1.5]
        assert canonical_args_json(args) == mod.canonical_args_json(args) == \
            orjson.dumps(args, option=orjson.OPT_SORT_KEYS)


# --- callList -------------------------------------------------------------------------


def test_call_list_builds_calls_in_order_with_canonical_args():
    payload = j({"calls": [{"functionId": "add", "args": [1, 2]},
                           {"args": [{"z": 1, "a": 2}], "functionId": "echo"},
                           {"functionId": "noargs", "args": []}]})
    calls = CallListBuilder().build(payload, CTX)
    assert calls == [CallSpec("add", b"[1,2]"), CallSpec("echo", b'[{"a":2,"z":1}]'), CallSpec("noargs", b"[]")]


def test_call_list_empty_list_is_allowed():
    assert CallListBuilder().build(b'{"calls": []}', CTX) == []


@pytest.mark.parametrize("payload,message", [
    (b"", "callList: the payload is empty"),
    (b"{not json", "callList: the payload is not valid JSON"),
    (b"[1]", "callList: the payload must be a JSON object, got array"),
    (b"{}", 'callList: "calls" is missing'),
    (b'{"calls": {}}', 'callList: "calls" must be an array, got object'),
    (b'{"calls": [], "x": 1}', "callList: unknown payload key(s) 'x'"),
    (b'{"calls": [1]}', "callList: calls[0] must be an object"),
    (b'{"calls": [{"args": []}]}', "calls[0].functionId is missing"),
    (b'{"calls": [{"functionId": "", "args": []}]}', "calls[0].functionId must be a non-empty string"),
    (b'{"calls": [{"functionId": 7, "args": []}]}', "calls[0].functionId must be a non-empty string, got number 7"),
    (b'{"calls": [{"functionId": "a/b", "args": []}]}', "is not a valid function id"),
    (b'{"calls": [{"functionId": "%s", "args": []}]}' % (b"f" * 257), "is 257 characters, over the limit of 256"),
    (b'{"calls": [{"functionId": "f", "args": [1]}, {"functionId": "f"}]}', "calls[1].args is missing"),
    (b'{"calls": [{"functionId": "f", "args": {"a": 1}}]}', "calls[0].args must be an array, got object"),
    (b'{"calls": [{"functionId": "f", "args": null}]}', "calls[0].args must be an array, got null"),
    (b'{"calls": [{"functionId": "f", "args": [], "extra": 1}]}', "callList: calls[0]: unknown payload key(s) 'extra'"),
])
def test_call_list_rejects_bad_payloads_clearly(payload, message):
    with pytest.raises(BuilderError) as ei:
        CallListBuilder().build(payload, CTX)
    assert message in str(ei.value)
    assert ei.value.retryable is False


# --- static and payload -----------------------------------------------------------------


def test_static_repeats_one_call():
    calls = StaticBuilder().build(j({"functionId": "add1", "count": 3, "args": [41]}), CTX)
    assert calls == [CallSpec("add1", b"[41]")] * 3
    assert StaticBuilder().build(j({"functionId": "f"}), CTX) == [CallSpec("f", b"[]")]
    assert StaticBuilder().build(j({"functionId": "f", "count": 0}), CTX) == []


@pytest.mark.parametrize("payload,message", [
    ({"count": 2}, "static: functionId is missing"),
    ({"functionId": "f", "count": -1}, "count must be between 0 and"),
    ({"functionId": "f", "count": "2"}, "count must be an integer, got string"),
    ({"functionId": "f", "count": True}, "count must be an integer, got boolean"),
    ({"functionId": "f", "args": 1}, "args must be an array, got number"),
    ({"functionId": "f", "what": 1}, "unknown payload key(s) 'what'"),
])
def test_static_rejects(payload, message):
    with pytest.raises(BuilderError, match=None) as ei:
        StaticBuilder().build(j(payload), CTX)
    assert message in str(ei.value)


def test_payload_builder_passes_the_whole_payload_as_the_single_argument():
    calls = PayloadBuilder().build(b'{"functionId": "echo", "b": [1], "a": "x"}', CTX)
    assert calls == [CallSpec("echo", b'[{"a":"x","b":[1],"functionId":"echo"}]')]
    with pytest.raises(BuilderError, match="payload: functionId is missing"):
        PayloadBuilder().build(b'{"a": 1}', CTX)
    with pytest.raises(BuilderError, match="payload: the payload must be a JSON object"):
        PayloadBuilder().build(b'"x"', CTX)


# --- rangeScan ------------------------------------------------------------------------------


def test_range_scan_eager_build_matches_python_range():
    calls = RangeScanBuilder().build(j({"functionId": "square", "start": 3, "stop": -4, "step": -3}), CTX)
    assert calls == [CallSpec("square", canonical_args_json([i])) for i in range(3, -4, -3)]
    assert RangeScanBuilder().build(j({"functionId": "sq", "start": 0, "stop": 3}), CTX) == [
        CallSpec("sq", b"[0]"), CallSpec("sq", b"[1]"), CallSpec("sq", b"[2]")]
    assert RangeScanBuilder().build(j({"functionId": "sq", "start": 5, "stop": 5}), CTX) == []


def test_range_scan_stream_yields_the_same_calls_in_bounded_batches():
    b = RangeScanBuilder()
    payload = j({"functionId": "sq", "start": -50, "stop": 1000, "step": 7})
    stream = b.prepare_stream(payload, CTX)
    assert stream.total == len(range(-50, 1000, 7))
    batches = list(stream.batches(max_rows=16, max_args_bytes=1 << 20))
    assert all(0 < len(x) <= 16 for x in batches)
    assert list(itertools.chain.from_iterable(batches)) == b.build(payload, CTX)


def test_range_scan_stream_respects_the_byte_cap_and_is_lazy():
    stream = RangeScanBuilder().prepare_stream(j({"functionId": "f", "start": 0, "stop": 10**15}), CTX)
    it = stream.batches(max_rows=8192, max_args_bytes=100)
    first = next(it)
    assert sum(len(c.args_json) for c in first) <= 100
    assert first[0] == CallSpec("f", b"[0]")
    stream.close()
    assert list(it) == []


def test_range_scan_refuses_huge_eager_builds_with_a_hint():
    with pytest.raises(BuilderError, match="STREAM_BUILD_ENABLED"):
        RangeScanBuilder().build(j({"functionId": "f", "start": 0, "stop": MAX_EAGER_CALLS + 1}), CTX)


@pytest.mark.parametrize("payload,message", [
    ({"functionId": "f", "stop": 3}, "rangeScan: start is missing"),
    ({"functionId": "f", "start": 0}, "rangeScan: stop is missing"),
    ({"functionId": "f", "start": 0, "stop": 3, "step": 0}, "step must not be 0"),
    ({"functionId": "f", "start": 0.5, "stop": 3}, "start must be an integer, got number 0.5"),
    ({"start": 0, "stop": 3}, "functionId is missing"),
    ({"functionId": "f", "start": 0, "stop": 2**63}, "stop 9223372036854775808 is out of the 64-bit"),
    ({"functionId": "f", "start": 0, "stop": 1e20}, "stop must be an integer, got number"),
    ({"functionId": "f", "start": 0, "stop": 3, "by": 1}, "unknown payload key(s) 'by'"),
])
def test_range_scan_validates_in_prepare_stream_too(payload, message):
    for fn in (RangeScanBuilder().build, RangeScanBuilder().prepare_stream):
        with pytest.raises(BuilderError) as ei:
            fn(j(payload), CTX)
        assert message in str(ei.value)


# --- batching and registry -----------------------------------------------------------------


def test_batch_specs_bounds_rows_and_bytes_and_keeps_big_calls_alone():
    specs = [CallSpec("f", b"x" * n) for n in (3, 3, 10, 1, 1, 1, 1)]
    batches = list(batch_specs(iter(specs), max_rows=3, max_args_bytes=6))
    assert [[len(c.args_json) for c in b] for b in batches] == [[3, 3], [10], [1, 1, 1], [1]]
    assert list(batch_specs(iter([]), 1, 1)) == []
    with pytest.raises(ValueError):
        list(batch_specs(iter(specs), 0, 1))


def test_builders_satisfy_the_protocols():
    for cls in (CallListBuilder, StaticBuilder, PayloadBuilder, RangeScanBuilder):
        assert isinstance(cls(), CallBuilder)
    assert isinstance(RangeScanBuilder(), StreamingCallBuilder)
    assert not is_streaming(CallListBuilder()) and is_streaming(RangeScanBuilder())


def test_builder_registry():
    reg = BuilderRegistry.from_names(sorted(KNOWN_BUILDERS), data=DataPlane({}))
    assert len(reg) == 6 and "callList" in reg and "dbscan" in reg and "tableScan" not in reg
    assert reg.get("nope") is None
    assert reg.is_streaming("rangeScan") and not reg.is_streaming("callList") and not reg.is_streaming("nope")
    assert reg.is_streaming("dbscan") and reg.is_streaming("bundleScan")
    with pytest.raises(ValueError, match="unknown call builder 'tableScan'"):
        BuilderRegistry.from_names(["tableScan"])
    with pytest.raises(ValueError, match="'dbscan' needs the Worker's data plane"):
        BuilderRegistry.from_names(["dbscan"])
    with pytest.raises(ValueError, match="registered twice"):
        BuilderRegistry.from_names(["callList", "callList"])
