"""The packed call list (calllist): the compiled module and its twin pack the
same entries into the same arrays, call the builder's check exactly where the
twin does, and read back as the same sequence of CallSpecs."""
from array import array

import pytest

from blockx._fast import implementations, load
from blockx.plugins.builder_api import CallSpec

IMPLS = implementations("calllist")
canonical = load("cachekey").canonical_args_json


@pytest.fixture(params=IMPLS, ids=[label for label, _ in IMPLS])
def mod(request):
    return request.param[1]


def _checker(log):
    def check(i, entry):
        log.append(i)
        if not isinstance(entry, dict) or not isinstance(entry.get("args"), list):
            raise ValueError(f"bad entry {i}")
        return str(entry["functionId"]), entry["args"]
    return check


def test_entries_pack_into_arrays_and_read_back_as_callspecs(mod):
    entries = [{"functionId": "add", "args": [1, 2]}, {"functionId": "echo", "args": [{"z": 1, "a": 2}]},
               {"functionId": "add", "args": []}, {"functionId": "add", "args": ["é", None]}]
    log: list = []
    packed = mod.pack_call_list(entries, _checker(log), CallSpec)
    assert log == [0, 1]                  # only the first entry of each function id is checked
    assert packed.fids == ["add", "echo"]
    assert type(packed.fidx) is array and list(packed.fidx) == [0, 1, 0, 0]
    want = [CallSpec(e["functionId"], canonical(e["args"])) for e in entries]
    assert packed.args == b"".join(s.args_json for s in want)
    assert list(packed.offs) == [0, 5, 20, 22, 33] and packed.offs[-1] == len(packed.args)
    assert len(packed) == 4 and list(packed) == want and packed == want and want == packed
    assert packed[1] == want[1] and packed[-1] == want[3] and type(packed[0]) is CallSpec
    with pytest.raises(IndexError):
        packed[4]
    with pytest.raises(TypeError):
        packed["0"]
    assert packed != want[:3] and packed != [*want[:3], CallSpec("add", b"[9]")]


def test_unusual_entries_go_through_the_check_and_its_error_stops_the_pack(mod):
    class Fid(str):
        pass
    log: list = []
    entries = [{"functionId": "f", "args": [1]}, {"functionId": Fid("f"), "args": [2]},
               {"functionId": "f", "args": [3], "x": 0}, {"functionId": "f", "args": (4,)}]
    with pytest.raises(ValueError, match="bad entry 3"):
        mod.pack_call_list(entries, _checker(log), CallSpec)
    assert log == [0, 1, 2, 3]
    packed = mod.pack_call_list(entries[:3], _checker([]), CallSpec)
    assert packed.fids == ["f"] and list(packed.fidx) == [0, 0, 0] and packed.args == b"[1][2][3]"
    with pytest.raises(TypeError, match="entries must be a list"):
        mod.pack_call_list(tuple(entries), _checker([]), CallSpec)


def test_large_args_grow_the_buffer_and_clear_drops_everything(mod):
    entries = [{"functionId": "f", "args": ["x" * (1000 + i)]} for i in range(300)]
    packed = mod.pack_call_list(entries, _checker([]), CallSpec)
    assert list(packed) == [CallSpec("f", canonical(e["args"])) for e in entries]
    assert len(packed.args) == sum(1004 + i for i in range(300))
    packed.clear()
    assert len(packed) == 0 and packed == [] and packed.args == b"" and list(packed.offs) == [0]
    empty = mod.pack_call_list([], _checker([]), CallSpec)
    assert len(empty) == 0 and list(empty.offs) == [0] and empty.fids == []


def test_compiled_and_twin_pack_alike():
    entries = [{"functionId": f"f{i % 3}", "args": [i, {"b": i, "a": [i]}]} for i in range(50)]
    packs = [m.pack_call_list(entries, _checker([]), CallSpec) for _, m in IMPLS]
    for p in packs[1:]:
        assert (p.fids, list(p.fidx), p.args, list(p.offs)) == (
            packs[0].fids, list(packs[0].fidx), packs[0].args, list(packs[0].offs))
