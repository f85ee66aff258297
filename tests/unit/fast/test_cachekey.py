"""Cache keys: MurmurHash3_x64_128 against published vectors, the key layout,
canonical args JSON, bad input, and bit-for-bit parity of compiled and twin."""

import struct

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from blockx._fast import implementations

IMPLS = implementations("cachekey")


@pytest.fixture(params=IMPLS, ids=[label for label, _ in IMPLS])
def C(request):
    return request.param[1]


# Published MurmurHash3_x64_128 vectors (seed 0x9747b28c), bytes h1le || h2le.
VECTORS = [
    (b"", "B3BBAA1D8A202B397A9502E38F60B093"),
    (b"The quick brown fox jumps over the lazy dog", "213163D23B7F8A73E516C07E727345F9"),
    (b"The quick brown fox jumps over the lazy cog", "94618270B057CDB83CF873585B456F55"),
    (b"THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG", "6C8AD027E39089788AD2CB67789CA4CF"),
    (b"THE QUICK BROWN FOX JUMPS OVER THE LAZY COG", "DD904D9A52D2FB5E71EAD0546624BEA0"),
]


@pytest.mark.parametrize("data,expected", VECTORS)
def test_hash128_published_vectors(C, data, expected):
    assert C.hash128(data, 0x9747B28C).hex().upper() == expected


def test_hash128_empty_seed0_is_zero(C):
    assert C.hash128(b"") == bytes(16)


def test_hash128_smhasher_verification_value(C):
    # SMHasher's VerificationTest: hash keys {}, {0}, {0,1}, ... {0..254} with
    # seed 256-len, hash the concatenation with seed 0; the first 4 bytes as a
    # little-endian u32 must be 0x6384BA69 for MurmurHash3_x64_128. Exercises
    # every tail length and multi-block input.
    buf = b"".join(C.hash128(bytes(range(n)), 256 - n) for n in range(256))
    assert struct.unpack("<I", C.hash128(buf, 0)[:4])[0] == 0x6384BA69


def test_hash128_accepts_bytes_like(C):
    d = b"0123456789abcdefXYZ"
    assert C.hash128(bytearray(d)) == C.hash128(memoryview(d)) == C.hash128(d)
    assert C.hash128(memoryview(d)[::2]) == C.hash128(d[::2])


def test_cache_key_layout(C):
    # u32le(len(fid)) fid u32le(len(digest)) digest args, hashed with seed 0.
    fid, dig, args = "add", "sha256:ab", b"[1,2]"
    raw = struct.pack("<I", 3) + b"add" + struct.pack("<I", 9) + b"sha256:ab" + b"[1,2]"
    assert C.cache_key(fid, dig, args) == C.hash128(raw, 0)


def test_cache_key_known_value(C):
    # Pinned so a change to the layout or the hash cannot go unnoticed
    # (a changed key would silently split caches between worker versions).
    assert C.cache_key("add", "d", b"[1,2]").hex() == EXPECTED_ADD


EXPECTED_ADD = "12df1b10dda7177344918e05b4190d88"


def test_cache_key_is_16_bytes_and_deterministic(C):
    k = C.cache_key("f", "d", b"[]")
    assert isinstance(k, bytes) and len(k) == 16
    assert C.cache_key("f", "d", b"[]") == k


def test_length_prefixes_prevent_ambiguity(C):
    assert C.cache_key("ab", "c", b"") != C.cache_key("a", "bc", b"")
    assert C.cache_key("a", "b", b"c") != C.cache_key("a", "bc", b"")
    assert C.cache_key("", "", b"ab") != C.cache_key("a", "", b"b")


def test_each_component_matters(C):
    base = C.cache_key("f", "d", b"[1]")
    assert C.cache_key("g", "d", b"[1]") != base
    assert C.cache_key("f", "e", b"[1]") != base
    assert C.cache_key("f", "d", b"[2]") != base


def test_non_ascii_ids_are_utf8(C):
    raw = struct.pack("<I", 2) + "é".encode() + struct.pack("<I", 3) + "€".encode() + b"[]"
    assert C.cache_key("é", "€", b"[]") == C.hash128(raw)


def test_large_args(C):
    args = b"[" + b"1," * 5000 + b"1]"
    k = C.cache_key("f", "d", args)
    assert k != C.cache_key("f", "d", args[:-2] + b"2]")


def test_bytes_like_args(C):
    assert C.cache_key("f", "d", bytearray(b"[1]")) == C.cache_key("f", "d", b"[1]")
    assert C.cache_key("f", "d", memoryview(b"[1]")) == C.cache_key("f", "d", b"[1]")


def test_str_subclass_ids(C):
    class S(str):
        def __str__(self):
            return "other"

    assert C.cache_key(S("f"), S("d"), b"[]") == C.cache_key("f", "d", b"[]")


@pytest.mark.parametrize("fid,dig,args", [
    (None, "d", b"[]"), (b"f", "d", b"[]"), ("f", None, b"[]"), ("f", 1, b"[]"),
    ("f", "d", "[]"), ("f", "d", None), ("f", "d", [1]),
])
def test_bad_types(C, fid, dig, args):
    with pytest.raises(TypeError):
        C.cache_key(fid, dig, args)


def test_hash128_bad_type(C):
    with pytest.raises(TypeError):
        C.hash128("text")


def test_unencodable_id(C):
    with pytest.raises(UnicodeEncodeError):
        C.cache_key("\ud800", "d", b"[]")


def test_canonical_args_json_sorts_keys(C):
    a = C.canonical_args_json([{"b": 1, "a": {"y": 2, "x": 1}}, 3])
    b = C.canonical_args_json([{"a": {"x": 1, "y": 2}, "b": 1}, 3])
    assert a == b == b'[{"a":{"x":1,"y":2},"b":1},3]'


def test_canonical_args_json_unicode_and_types(C):
    assert C.canonical_args_json(["é", None, True, 1.5]) == '["é",null,true,1.5]'.encode()


def test_canonical_args_json_rejects_non_json(C):
    with pytest.raises(TypeError):
        C.canonical_args_json([object()])


# --- parity -----------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=10)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(fid=st.text(max_size=40), dig=st.text(max_size=70), args=st.binary(max_size=700),
       seed=st.integers(0, 2**32 - 1))
def test_implementations_agree_on_keys(fid, dig, args, seed):
    keys = {mod.cache_key(fid, dig, args) for _, mod in IMPLS}
    hashes = {mod.hash128(args, seed) for _, mod in IMPLS}
    assert len(keys) == 1 and len(hashes) == 1


@settings(max_examples=100, deadline=None)
@given(args=st.lists(JSON, max_size=5))
def test_implementations_agree_on_canonical_json(args):
    outs = {mod.canonical_args_json(args) for _, mod in IMPLS}
    assert len(outs) == 1
    (out,) = outs
    assert orjson.loads(out) == args


@pytest.mark.parametrize("label,mod", IMPLS, ids=[i[0] for i in IMPLS])
def test_canonical_args_json_holds_no_oversized_buffer(label, mod):
    # A queued call keeps its args bytes for its whole life; orjson's own result
    # object pins a ~4 KiB buffer, so the function must return a compact copy.
    import tracemalloc
    tracemalloc.start()
    try:
        keep = [mod.canonical_args_json([i, {"b": 1, "a": 2}]) for i in range(2000)]
        per_object = tracemalloc.get_traced_memory()[0] / len(keep)
    finally:
        tracemalloc.stop()
    assert keep[5] == b'[5,{"a":2,"b":1}]'
    assert per_object < 512, f"{per_object:.0f} bytes held per args object"
