"""The per-call commands, compiled and twin: the same construction, equality,
repr and (un)hashability as the twin's dataclasses."""

import pytest

from blockx._fast import compiled, implementations

IMPLS = implementations("commands", "blockx.core.dispatch")
ARGS = {
    "BindCall": ("t/0", "e1", "t", False, ""),
    "UnbindCall": ("t/0", "e1"),
    "DispatchCallCmd": ("t/0", "e1", "t", "f", "d" * 64, "main", b"[1]", 0, 1, ""),
}
FIELDS = {
    "BindCall": ("call_id", "executor_id", "task_id", "is_subcall", "parent_call_id"),
    "UnbindCall": ("call_id", "executor_id"),
    "DispatchCallCmd": ("call_id", "executor_id", "task_id", "function_id", "digest", "entry_selector",
                        "args_json", "budget_ms", "attempt_seq", "parent_call_id"),
}


@pytest.fixture(params=IMPLS, ids=[label for label, _ in IMPLS])
def mod(request):
    return request.param[1]


@pytest.mark.parametrize("name", sorted(ARGS))
def test_commands_behave_like_the_twin_dataclasses(mod, name):
    twin = IMPLS[-1][1]
    cls, twin_cls = getattr(mod, name), getattr(twin, name)
    args = ARGS[name]
    a, b = cls(*args), cls(**dict(zip(FIELDS[name], args)))
    assert a == b and not (a != b)
    assert repr(a) == repr(twin_cls(*args))
    assert tuple(getattr(a, f) for f in FIELDS[name]) == args
    other = cls(*(("t/9",) + args[1:]))
    assert a != other and not (a == other)
    assert a != twin_cls(*args) or cls is twin_cls      # another class is never equal
    assert (a == 1) is False and (a != 1) is True
    with pytest.raises(TypeError):
        hash(a)
    a.call_id = "t/9"
    assert a == other
    with pytest.raises(TypeError):
        cls(*args[:-1])


@pytest.mark.parametrize("name", sorted(ARGS))
def test_compiled_commands_stay_out_of_the_cyclic_gc(name):
    import gc
    assert not gc.is_tracked(getattr(compiled("commands", "blockx.core.dispatch"), name)(*ARGS[name]))
