"""Frame codec: round trips fed whole / byte by byte / in random splits, sidecars
from 0 B to several MiB, a table of malformed inputs with their typed errors,
and parity between the compiled codec and its pure-Python twin."""

import random
import struct

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blockx._fast import errors, implementations
from blockx.protocol import messages as m

IMPLS = implementations("codec")
IDS = [label for label, _ in IMPLS]
MODS = [mod for _, mod in IMPLS]
MAX = 16 * 1024 * 1024


@pytest.fixture(params=MODS, ids=IDS)
def codec(request):
    return request.param


def u32(n):
    return struct.pack(">I", n)


def frame(body: bytes) -> bytes:
    return u32(len(body)) + body


def sidecar_frame(js: bytes, side: bytes, json_len=None) -> bytes:
    jl = len(js) if json_len is None else json_len
    return frame(b"BXB1" + u32(jl) + js + side)


def normalized(env):
    """What the peer sees for `env`: its JSON round trip (Fragments spliced)."""
    return orjson.loads(orjson.dumps(env))


def feed_all(dec, data, sizes):
    out = []
    pos = 0
    for n in sizes:
        out += dec.feed(data[pos:pos + n])
        pos += n
    out += dec.feed(data[pos:])
    return out


def random_sizes(rng, total):
    sizes = []
    left = total
    while left > 0:
        n = rng.choice((1, 2, 3, 5, 8, 13, rng.randint(1, 64), rng.randint(1, 4096)))
        sizes.append(min(n, left))
        left -= sizes[-1]
    return sizes


ENVS = [
    {"messageType": "HeartbeatAck", "callId": "", "requestId": ""},
    {"messageType": "ExecuteCall", "callId": "c-1", "requestId": "",
     "payload": {"taskId": "t", "args": [1, "two", {"3": None}], "attemptSeq": 1}},
    {"messageType": "CallCompleted", "callId": "ü/sub-1", "requestId": "",
     "payload": {"output": {"nested": [1.5, -2, True, False, None, "snow ☃"]}}},
]


# --- encoding ------------------------------------------------------------------------

def test_encode_plain_frame_layout(codec):
    env = {"messageType": "X", "n": 1}
    body = orjson.dumps(env)
    assert codec.encode_frame(env) == u32(len(body)) + body
    assert codec.encode_frame(env, None) == u32(len(body)) + body


def test_encode_sidecar_frame_layout(codec):
    env = {"messageType": "X"}
    js = orjson.dumps(env)
    side = b"\x00\xffraw"
    got = codec.encode_frame(env, side)
    assert got == u32(8 + len(js) + len(side)) + b"BXB1" + u32(len(js)) + js + side
    assert codec.encode_frame(env, bytearray(side)) == got
    assert codec.encode_frame(env, memoryview(side)) == got


def test_encode_empty_sidecar_is_still_a_sidecar_frame(codec):
    got = codec.encode_frame({"messageType": "X"}, b"")
    assert got[4:8] == b"BXB1"
    assert codec.FrameDecoder().feed(got) == [({"messageType": "X"}, b"")]


def test_fragment_values_are_spliced_verbatim(codec):
    env = {"messageType": "ExecuteCall", "payload": {"args": orjson.Fragment(b'[1, {"a" :2}]')}}
    encoded = codec.encode_frame(env)
    assert b'"args":[1, {"a" :2}]' in encoded
    [(got, side)] = codec.FrameDecoder().feed(encoded)
    assert got["payload"]["args"] == [1, {"a": 2}] and side is None


def test_encode_frames_equals_concatenated_frames(codec):
    items = [(ENVS[0], None), (ENVS[1], b"side"), (ENVS[2], b""), (ENVS[0], bytearray(b"x"))]
    assert codec.encode_frames(items) == b"".join(codec.encode_frame(e, s) for e, s in items)
    assert codec.encode_frames(iter(items)) == codec.encode_frames(items)
    assert codec.encode_frames([]) == b""


def test_encoder_refuses_oversized_frames(codec):
    big = b"x" * (MAX - 20)
    with pytest.raises(errors.FrameTooLarge, match=r"exceeds the 16777216-byte limit"):
        codec.encode_frame({"messageType": "X", "pad": "y" * 30}, big)
    with pytest.raises(errors.FrameTooLarge):
        codec.encode_frame({"messageType": "X", "pad": "y" * MAX})
    with pytest.raises(errors.FrameTooLarge):
        codec.encode_frames([(ENVS[0], None), ({"messageType": "X", "pad": "y" * 30}, big)])


def test_encoder_accepts_a_frame_of_exactly_the_limit(codec):
    js = orjson.dumps({"messageType": "X"})
    side = b"s" * (MAX - 8 - len(js))
    encoded = codec.encode_frame({"messageType": "X"}, side)
    assert len(encoded) == 4 + MAX
    [(env, got)] = codec.FrameDecoder().feed(encoded)
    assert env == {"messageType": "X"} and got == side


def test_encoder_rejects_non_buffer_sidecars_and_unencodable_envelopes(codec):
    with pytest.raises(TypeError):
        codec.encode_frame({"messageType": "X"}, "text is not bytes")
    with pytest.raises(TypeError):
        codec.encode_frames([({"messageType": "X"}, 5)])
    with pytest.raises(TypeError):  # orjson.JSONEncodeError is a TypeError
        codec.encode_frame({"messageType": "X", "v": object()})


# --- decoding: chunking ---------------------------------------------------------------

STREAM_ITEMS = [(ENVS[0], None), (ENVS[1], b"\x00BXB1\xff" * 3), (ENVS[2], b""),
                (ENVS[1], None), (ENVS[0], bytes(range(256)) * 64), (ENVS[2], None)]


def expected(items):
    return [(normalized(e), None if s is None else bytes(s)) for e, s in items]


def test_decode_whole_stream_in_one_chunk(codec):
    data = codec.encode_frames(STREAM_ITEMS)
    dec = codec.FrameDecoder()
    assert dec.feed(data) == expected(STREAM_ITEMS)
    assert dec.buffered == 0 and not dec.failed
    dec.eof()


def test_decode_one_byte_at_a_time(codec):
    data = codec.encode_frames(STREAM_ITEMS)
    dec = codec.FrameDecoder()
    out = []
    for i in range(len(data)):
        out += dec.feed(data[i:i + 1])
        # Nothing is held back beyond the current partial frame.
        assert dec.buffered <= 4 + 8 + 256 * 64 + 200
    assert out == expected(STREAM_ITEMS)
    assert dec.buffered == 0


def test_decode_random_splits(codec):
    data = codec.encode_frames(STREAM_ITEMS)
    rng = random.Random(1234)
    for _ in range(50):
        dec = codec.FrameDecoder()
        assert feed_all(dec, data, random_sizes(rng, len(data))) == expected(STREAM_ITEMS)
        assert dec.buffered == 0


def test_every_split_point_of_a_two_frame_stream(codec):
    items = [(ENVS[1], b"sidecar-bytes"), (ENVS[2], None)]
    data = codec.encode_frames(items)
    for i in range(len(data) + 1):
        for j in range(i, len(data) + 1):
            dec = codec.FrameDecoder()
            out = dec.feed(data[:i]) + dec.feed(data[i:j]) + dec.feed(data[j:])
            assert out == expected(items), (i, j)


def test_feed_accepts_bytearray_and_memoryview(codec):
    data = codec.encode_frames(STREAM_ITEMS)
    for wrap in (bytearray, memoryview, lambda b: memoryview(bytearray(b))):
        dec = codec.FrameDecoder()
        out = dec.feed(wrap(data[:100])) + dec.feed(wrap(data[100:]))
        assert out == expected(STREAM_ITEMS)


def test_decoder_keeps_no_reference_to_a_mutable_chunk(codec):
    data = codec.encode_frame(ENVS[1], b"abcdef")
    chunk = bytearray(data[:-3])
    dec = codec.FrameDecoder()
    assert dec.feed(chunk) == []
    chunk[:] = b"\xee" * len(chunk)  # the caller reuses its buffer
    assert dec.feed(data[-3:]) == expected([(ENVS[1], b"abcdef")])


def test_partial_frame_counts_as_buffered_and_eof_reports_truncation(codec):
    data = codec.encode_frame(ENVS[1])
    dec = codec.FrameDecoder()
    assert dec.feed(data[:2]) == [] and dec.buffered == 2
    with pytest.raises(errors.TruncatedFrame, match=r"length prefix \(2 of 4 bytes\)"):
        dec.eof()
    assert dec.failed
    dec = codec.FrameDecoder()
    dec.feed(data[:10])
    assert dec.buffered == 10
    with pytest.raises(errors.TruncatedFrame, match=rf"6 of {len(data) - 4} body bytes"):
        dec.eof()
    dec = codec.FrameDecoder()
    dec.feed(data)
    dec.eof()  # clean end: no error


def test_empty_feed_is_harmless(codec):
    dec = codec.FrameDecoder()
    assert dec.feed(b"") == []
    data = codec.encode_frame(ENVS[0])
    dec.feed(data[:3])
    assert dec.feed(b"") == []
    assert dec.feed(data[3:]) == expected([(ENVS[0], None)])


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 4095, 65536, 1 << 20, (1 << 20) + 3, 5 << 20])
def test_sidecar_sizes_round_trip(codec, size):
    side = random.Random(size).randbytes(size)
    env = {"messageType": "ResumeCall", "callId": "c", "payload": {"n": size}}
    data = codec.encode_frame(env, side) + codec.encode_frame(ENVS[0])
    want = [(env, side), (ENVS[0], None)]
    assert codec.FrameDecoder().feed(data) == want
    for chunk in (1000, 65536, 262144):
        if size < 4096 or chunk >= 65536:
            dec = codec.FrameDecoder()
            assert feed_all(dec, data, [chunk] * (len(data) // chunk)) == want


def test_large_plain_json_frame_split_across_chunks(codec):
    env = {"messageType": "CallCompleted", "payload": {"output": ["x" * 1000] * 2000}}
    data = codec.encode_frame(env)
    dec = codec.FrameDecoder()
    assert feed_all(dec, data, [7] + [65536] * (len(data) // 65536)) == [(env, None)]


# --- decoding: malformed input -------------------------------------------------------

MALFORMED = [
    # (id, bytes, error class, message regex)
    ("too-large", u32(20_000_000) + b"{", errors.FrameTooLarge,
     r"^frame length 20000000 exceeds the 16777216-byte limit$"),
    ("too-large-by-one", u32(MAX + 1), errors.FrameTooLarge, r"frame length 16777217"),
    ("too-large-max-u32", b"\xff\xff\xff\xff", errors.FrameTooLarge, r"4294967295"),
    ("empty-body", u32(0), errors.BadMagic, r"^empty frame body"),
    ("bad-magic", frame(b"BXB2" + u32(0)), errors.BadMagic, r"starts with b'BXB2'"),
    ("short-magic", frame(b"BX"), errors.BadMagic, r"starts with b'BX'"),
    # 3-byte body "BXB" followed by more bytes: the magic check must stay inside the body
    ("short-magic-then-1", frame(b"BXB") + b"1\x00\x00\x00\x00", errors.BadMagic,
     r"starts with b'BXB';"),
    ("json-array-body", frame(b"[1,2]"), errors.BadMagic, r"starts with b'\[1,2'"),
    ("leading-space", frame(b' {"messageType":"X"}'), errors.BadMagic, r"expected '\{'"),
    ("binary-body", frame(b"\x00\x01\x02\x03\x04"), errors.BadMagic, r"\\x00\\x01"),
    ("bxb1-short-header", frame(b"BXB1\x00\x00"), errors.JsonLengthOutOfRange,
     r"6 bytes is shorter than its 8-byte header"),
    ("json-len-past-end", sidecar_frame(b'{"messageType":"X"}', b"", json_len=20),
     errors.JsonLengthOutOfRange, r"JSON length 20 runs past the frame end"),
    ("json-len-huge", sidecar_frame(b"{}", b"", json_len=0xFFFFFFFF),
     errors.JsonLengthOutOfRange, r"4294967295"),
    ("invalid-json", frame(b"{not json}"), errors.InvalidJson, r"^invalid JSON in frame envelope"),
    ("truncated-json", frame(b'{"messageType":"X"'), errors.InvalidJson, r"invalid JSON"),
    ("trailing-garbage", frame(b'{"messageType":"X"} x'), errors.InvalidJson, r"invalid JSON"),
    ("invalid-utf8", frame(b'{"messageType":"\xff"}'), errors.InvalidJson, r"invalid JSON"),
    ("sidecar-invalid-json", sidecar_frame(b"{", b"raw"), errors.InvalidJson, r"invalid JSON"),
    ("sidecar-empty-json", sidecar_frame(b"", b"raw"), errors.InvalidJson, r"invalid JSON"),
    ("sidecar-array", sidecar_frame(b"[1]", b"raw"), errors.NotAnObject,
     r"must be a JSON object, got array"),
    ("sidecar-string", sidecar_frame(b'"s"', b""), errors.NotAnObject, r"got string"),
    ("sidecar-null", sidecar_frame(b"null", b""), errors.NotAnObject, r"got null"),
    ("sidecar-number", sidecar_frame(b"12", b""), errors.NotAnObject, r"got number"),
    ("no-message-type", frame(b'{"callId":"c"}'), errors.MissingMessageType,
     r"^envelope has no messageType$"),
    ("null-message-type", frame(b'{"messageType":null}'), errors.MissingMessageType,
     r"no messageType"),
    ("int-message-type", frame(b'{"messageType":5}'), errors.MissingMessageType,
     r"must be a non-empty string, got int 5"),
    ("empty-message-type", frame(b'{"messageType":""}'), errors.MissingMessageType,
     r"non-empty string, got str"),
    ("sidecar-no-message-type", sidecar_frame(b"{}", b"x"), errors.MissingMessageType,
     r"no messageType"),
]


@pytest.mark.parametrize("data,exc,pattern", [m[1:] for m in MALFORMED],
                         ids=[m[0] for m in MALFORMED])
def test_malformed_input_raises_its_typed_error(codec, data, exc, pattern):
    assert issubclass(exc, errors.FrameError) and issubclass(exc, ValueError)
    for sizes in ([], [1] * len(data), [len(data) // 2]):
        dec = codec.FrameDecoder()
        with pytest.raises(exc, match=pattern):
            feed_all(dec, data, sizes)
        assert dec.failed
        # A failed decoder stays failed, with the same error.
        with pytest.raises(exc, match=pattern):
            dec.feed(codec.encode_frame(ENVS[0]))
        dec.eof()  # no second error on eof


def test_too_large_is_detected_from_the_prefix_alone(codec):
    dec = codec.FrameDecoder()
    dec.feed(b"\x01\x00")
    with pytest.raises(errors.FrameTooLarge):
        dec.feed(b"\x00\x01")  # nothing of the body was sent (or buffered)


def test_frames_before_the_bad_one_ride_on_the_error(codec):
    good = codec.encode_frames([(ENVS[1], None), (ENVS[2], b"s")])
    dec = codec.FrameDecoder()
    assert dec.feed(codec.encode_frame(ENVS[0])) == expected([(ENVS[0], None)])
    with pytest.raises(errors.InvalidJson) as info:
        dec.feed(good + frame(b"{oops}") + codec.encode_frame(ENVS[0]))
    assert info.value.frames == expected([(ENVS[1], None), (ENVS[2], b"s")])
    with pytest.raises(errors.InvalidJson) as again:
        dec.feed(b"")
    assert again.value.frames == []


def test_error_is_raised_by_the_feed_that_completes_the_bad_frame(codec):
    bad = frame(b'{"messageType":7}')
    dec = codec.FrameDecoder()
    assert dec.feed(bad[:-1]) == []
    with pytest.raises(errors.MissingMessageType):
        dec.feed(bad[-1:])


# --- parity and round trips -------------------------------------------------------------

def test_compiled_and_twin_encode_identically_and_decode_each_other():
    data = [mod.encode_frames(STREAM_ITEMS) for mod in MODS]
    assert all(d == data[0] for d in data)
    for mod in MODS:
        assert mod.FrameDecoder().feed(data[0]) == expected(STREAM_ITEMS)
        assert mod.MAX_FRAME_BYTES == MAX
        assert mod.MAGIC == b"BXB1"


json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2 ** 63), 2 ** 64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=20))
json_value = st.recursive(
    json_leaf,
    lambda kids: st.one_of(st.lists(kids, max_size=5),
                           st.dictionaries(st.text(max_size=8), kids, max_size=5)),
    max_leaves=25)
envelopes = st.builds(
    lambda mt, rest: {**rest, "messageType": mt},
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=16),
    st.dictionaries(st.text(max_size=10), json_value, max_size=6))
sidecars = st.one_of(
    st.none(), st.binary(max_size=300),
    # a few big ones, generated cheaply from a size and a seed (up to just over 1 MiB)
    st.builds(lambda n, seed: random.Random(seed).randbytes(n),
              st.sampled_from([4096, 65537, (1 << 20) + 5]), st.integers(0, 9)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize=True)
@given(items=st.lists(st.tuples(envelopes, sidecars), min_size=1, max_size=6),
       split_seed=st.integers(0, 2 ** 32 - 1))
def test_hypothesis_round_trip_all_implementations(items, split_seed):
    want = expected(items)
    encoded = [mod.encode_frames(items) for mod in MODS]
    assert all(e == encoded[0] for e in encoded)
    data = encoded[0]
    rng = random.Random(split_seed)
    sizes = random_sizes(rng, len(data)) if len(data) < 20000 else \
        [rng.randint(1, 200000) for _ in range(len(data) // 50000 + 1)]
    for mod in MODS:
        assert mod.FrameDecoder().feed(data) == want
        dec = mod.FrameDecoder()
        assert feed_all(dec, data, sizes) == want
        assert dec.buffered == 0
        if len(data) < 3000:
            dec = mod.FrameDecoder()
            assert feed_all(dec, data, [1] * len(data)) == want


def _execute_call_by_dict(codec, c, t, f, d, e, a, p, b, at):
    return codec.encode_frame({"messageType": "ExecuteCall", "callId": c, "requestId": "", "payload": {
        "taskId": t, "functionId": f, "functionCodeDigest": d, "entrySelector": e,
        "args": orjson.Fragment(a), "parentCallId": p, "callBudgetMs": b, "attemptSeq": at}})


@pytest.mark.parametrize("fields", [
    ("t/0", "t", "add1", "d" * 64, "main", b"[1]", "", 120000, 1),
    ("t/1.7", "task with spaces", "f", "", "other", b'[{"a":1}]', "t/0", 0, 3),
    ('q"uote/0', "back\\slash", "tab\tfn", "d", "main", b"[]", "", 5, 1),      # escaped by orjson
    ("é/0", "t\x00", "f\x7f", "d", "main", b"[]", "p\n", 1, 2),                 # non-ASCII, controls, DEL
    ("t/0", "t", "f", "d", "main", b"[]", "", 10**18, 1),                      # past the template's ints
    ("t/0", "t", "f", "d", "main", b"[]", "", -1, 1),
    ("t/0", "t", "f", "d", "main", b"[]", "", True, 1),                        # bool is not an int here
    ("t/0", "t", "f", "d", "main", "[]", "", 7, 1),                            # str args (a Fragment takes it)
])
def test_execute_call_frames_are_byte_identical_to_encode_frame(codec, fields):
    want = _execute_call_by_dict(codec, *fields)
    assert codec.encode_execute_call(*fields) == want
    assert list(codec.FrameDecoder().feed(want))[0][0]["payload"]["attemptSeq"] == fields[8]


@given(st.lists(st.text(max_size=12), min_size=6, max_size=6),
       st.integers(min_value=0, max_value=2**63 - 1), st.integers(min_value=0, max_value=2**63 - 1))
@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_execute_call_template_matches_encode_frame_for_any_text(codec, texts, budget, attempt):
    fields = (texts[0], texts[1], texts[2], texts[3], texts[4], b"[0]", texts[5], budget, attempt)
    assert codec.encode_execute_call(*fields) == _execute_call_by_dict(codec, *fields)


def test_an_execute_call_over_the_frame_limit_is_refused(codec):
    with pytest.raises(errors.FrameTooLarge):
        codec.encode_execute_call("t/0", "t", "f", "d", "main", b"[" + b"1" * MAX + b"]", "", 1, 1)


def _call_completed_by_dict(codec, c, t, a, out, u, s, d):
    return codec.encode_frame({"messageType": "CallCompleted", "callId": c, "requestId": "", "payload": {
        "taskId": t, "attemptSeq": a, "output": orjson.Fragment(out), "budgetUsedMs": u,
        "startedAtMs": s, "durationMs": d}})


@pytest.mark.parametrize("fields", [
    ("t/0", "t", 1, b"42", 0, 1764590000000, 0),
    ("t/1.7/sub-3", "task with spaces", 3, b'{"a":[1,null]}', 12, 0, 5),
    ('q"uote/0', "back\\slash", 1, b"null", 0, 0, 0),       # escaped by orjson
    ("é/0", "t\x00", 2, b'"x"', 1, 2, 3),                      # non-ASCII, a control
    ("t/0", "t", 1, b"1", -1, 0, 0),                            # a negative int
    ("t/0", "t", True, b"1", 0, 0, 0),                          # bool is not an int here
    ("t/0", "t", 1, b"1", 0, 10**18, 0),                        # past the template's ints
    ("t/0", "t", 1, "1", 0, 0, 0),                              # str output (a Fragment takes it)
])
def test_call_completed_frames_are_byte_identical_to_encode_frame(codec, fields):
    want = _call_completed_by_dict(codec, *fields)
    assert codec.encode_call_completed(*fields) == want


@given(st.text(max_size=12), st.text(max_size=12), st.integers(min_value=0, max_value=2**63 - 1),
       st.integers(min_value=0, max_value=2**63 - 1))
@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_call_completed_template_matches_encode_frame_for_any_text(codec, call_id, task_id, used, started):
    fields = (call_id, task_id, 1, b"[0]", used, started, 7)
    assert codec.encode_call_completed(*fields) == _call_completed_by_dict(codec, *fields)


def test_a_call_completed_over_the_frame_limit_is_refused(codec):
    with pytest.raises(errors.FrameTooLarge):
        codec.encode_call_completed("t/0", "t", 1, b'"' + b"x" * MAX + b'"', 0, 0, 0)


def _resume_result_by_dict(codec, c, r, k, result, u):
    return codec.encode_frame({"messageType": "ResumeCall", "callId": c, "requestId": r, "payload": {
        "resumeKind": k, "result": orjson.Fragment(result), "budgetUsedMs": u}})


@pytest.mark.parametrize("fields", [
    ("t/0", "7", "subcall", b"42", 0),
    ("t/1.7/sub-3", "12", "io", b'{"a":[1,null]}', 12),
    ('q"uote/0', "back\\slash", "subcall", b"null", 0),       # escaped by orjson
    ("é/0", "r\x00", "io", b'"x"', 1),                          # non-ASCII, a control
    ("t/0", "1", "subcall", b"1", -1),                          # a negative int
    ("t/0", "1", "subcall", b"1", True),                        # bool is not an int here
    ("t/0", "1", "subcall", b"1", 10**18),                      # past the template's ints
    ("t/0", "1", "subcall", "1", 0),                            # str result (a Fragment takes it)
])
def test_resume_result_frames_are_byte_identical_to_encode_frame(codec, fields):
    want = _resume_result_by_dict(codec, *fields)
    assert codec.encode_resume_result(*fields) == want


@given(st.text(max_size=12), st.text(max_size=12), st.text(max_size=8), st.integers(min_value=0, max_value=2**63 - 1))
@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_resume_result_template_matches_encode_frame_for_any_text(codec, call_id, request_id, kind, used):
    fields = (call_id, request_id, kind, b"[0]", used)
    assert codec.encode_resume_result(*fields) == _resume_result_by_dict(codec, *fields)


def test_a_resume_result_over_the_frame_limit_is_refused(codec):
    with pytest.raises(errors.FrameTooLarge):
        codec.encode_resume_result("t/0", "1", "subcall", b'"' + b"x" * MAX + b'"', 0)


def _waiting_subcall_by_dict(codec, c, r, t, a, f, args, g, ancestry):
    return codec.encode_frame(m.call_waiting_subcall(c, r, t, a, f, orjson.Fragment(args), g,
                                                     orjson.Fragment(ancestry)))


@pytest.mark.parametrize("fields", [
    ("t/0", "7", "t", 1, "add", b"[3,17]", 0, b'["t/0"]'),
    ("t/1.7/sub-3", "12", "task with spaces", 3, "f", b'[{"a":1}]', 250, b'["t/1.7","t/1.7/sub-3"]'),
    ('q"uote/0', "back\\slash", "t", 1, "tab\tfn", b"[]", 0, b"[]"),     # escaped by orjson
    ("é/0", "r\x00", "t", 2, "f\x7f", b"[]", 1, b"[]"),                   # non-ASCII, controls, DEL
    ("t/0", "1", "t", 1, "f", b"[]", -1, b"[]"),                           # a negative int
    ("t/0", "1", "t", True, "f", b"[]", 0, b"[]"),                         # bool is not an int here
    ("t/0", "1", "t", 1, "f", b"[]", 10**18, b"[]"),                       # past the template's ints
    ("t/0", "1", "t", 1, "f", "[]", 0, "[]"),                              # str JSON (a Fragment takes it)
])
def test_call_waiting_subcall_frames_are_byte_identical_to_encode_frame(codec, fields):
    want = _waiting_subcall_by_dict(codec, *fields)
    assert codec.encode_call_waiting_subcall(*fields) == want


def test_a_templated_call_waiting_subcall_is_a_valid_frame(codec):
    frame = codec.encode_call_waiting_subcall("t/0", "7", "t", 1, "add", b"[3,17]", 0, b'["t/0"]')
    env = codec.FrameDecoder().feed(frame)[0][0]
    assert m.validate(env, m.EXECUTOR_TO_WORKER)["ancestry"] == ["t/0"]


@given(st.lists(st.text(max_size=12), min_size=4, max_size=4), st.integers(min_value=0, max_value=2**63 - 1),
       st.integers(min_value=0, max_value=2**63 - 1))
@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_call_waiting_subcall_template_matches_encode_frame_for_any_text(codec, texts, attempt, granted):
    fields = (texts[0], texts[1], texts[2], attempt, texts[3], b"[0]", granted, orjson.dumps([texts[0]]))
    assert codec.encode_call_waiting_subcall(*fields) == _waiting_subcall_by_dict(codec, *fields)


def test_a_call_waiting_subcall_over_the_frame_limit_is_refused(codec):
    with pytest.raises(errors.FrameTooLarge):
        codec.encode_call_waiting_subcall("t/0", "1", "t", 1, "f", b"[" + b"1" * MAX + b"]", 0, b"[]")
