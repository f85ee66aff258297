"""framecheck (compiled and twin): the fast acceptance of the frames of every
call and round trip agrees with the general validation on every envelope: it
accepts the common well-formed frames, and whatever it accepts the general path
accepts with the same payload and envelope; anything else it leaves alone."""

import copy

import orjson
import pytest

from blockx._fast import compiled, implementations, twin
from blockx._fast.errors import ProtocolError
from blockx.protocol import messages as m

IMPLS = implementations("framecheck")


def _checks(mod):
    return mod.FrameChecks(m.EXECUTE_CALL, m.RESUME_CALL, m.CALL_WAITING, m.CALL_COMPLETED,
                           m.WAIT_IO, m.WAIT_SUBCALL, m.DEFAULT_ENTRY_SELECTOR)


def _wire(env):
    return orjson.loads(orjson.dumps(env))


GOOD = [
    m.execute_call("c", "t", "f", "d", [1], 1),
    m.resume_call_result("c", "r", m.WAIT_SUBCALL, {"x": 1}, 3),
    m.resume_call_result("c", "r", m.WAIT_IO, [1, 2], 0),
    m.call_waiting_subcall("c", "r", "t", 1, "f", [1, 2], 0, ["p", "q"]),
    m.call_waiting_io("c", "r", "t", 1, "db", {"op": "get"}),
    m.call_completed("c", "t", 1, 5, 0),
]

# Values that break a key's type or presence, tried on every key of every frame.
ODD = [None, True, 1, 1.5, "", "s", [], ["x"], [1], {}, {"a": 1}]


def _mutations():
    for env in GOOD:
        env = _wire(env)
        yield env
        for key in list(env):
            for v in ODD:
                e = copy.deepcopy(env)
                e[key] = v
                yield e
            e = copy.deepcopy(env)
            del e[key]
            yield e
        for key in list(env["payload"]):
            for v in ODD:
                e = copy.deepcopy(env)
                e["payload"][key] = v
                yield e
            e = copy.deepcopy(env)
            del e["payload"][key]
            yield e
        e = copy.deepcopy(env)
        e["payload"]["error"] = {"errorKind": "X", "errorMessage": "m", "retryable": False}
        yield e
    yield from ([], "x", None, {"messageType": ["CallWaiting"]}, {"messageType": "Heartbeat"})


@pytest.mark.parametrize("label,mod", IMPLS, ids=[i[0] for i in IMPLS])
def test_the_common_frames_are_accepted_as_the_general_path_accepts_them(label, mod):
    checks = _checks(mod)
    for env in GOOD:
        fast_env, slow_env = _wire(env), _wire(env)
        fast = checks.route(fast_env, None)
        assert fast is not None, env["messageType"]
        assert fast == m._validate(slow_env, None) and fast_env == slow_env


@pytest.mark.parametrize("label,mod", IMPLS, ids=[i[0] for i in IMPLS])
def test_what_the_fast_path_accepts_the_general_path_accepts_the_same(label, mod):
    checks = _checks(mod)
    n = accepted = 0
    for env in _mutations():
        n += 1
        for accept in (None, m.EXECUTOR_TO_WORKER, m.WORKER_TO_EXECUTOR):
            fast_env, slow_env = copy.deepcopy(env), copy.deepcopy(env)
            fast = checks.route(fast_env, accept)
            if fast is None:
                assert fast_env == env           # declined: nothing filled in
                continue
            accepted += 1
            try:
                slow = m._validate(slow_env, accept)
            except ProtocolError as exc:   # pragma: no cover - the failure this test looks for
                pytest.fail(f"fast path accepted what validation refuses ({exc}): {env!r}")
            assert fast == slow and fast_env == slow_env, env
    assert n > 300 and accepted > 50


def test_compiled_and_twin_decide_alike():
    a, b = _checks(compiled("framecheck")), _checks(twin("framecheck"))
    for env in _mutations():
        for accept in (None, m.EXECUTOR_TO_WORKER, m.WORKER_TO_EXECUTOR):
            ea, eb = copy.deepcopy(env), copy.deepcopy(env)
            assert a.route(ea, accept) == b.route(eb, accept) and ea == eb, env


@pytest.mark.parametrize("label,mod", IMPLS, ids=[i[0] for i in IMPLS])
def test_each_check_takes_only_its_own_type(label, mod):
    checks = _checks(mod)
    ex, res, wait, done = (_wire(e) for e in (GOOD[0], GOOD[1], GOOD[3], GOOD[5]))
    assert checks.completed(ex, None) is None and checks.execute(done, None) is None
    assert checks.wait_resume(ex, None) is None and checks.execute(wait, None) is None
    assert checks.completed(res, None) is None and checks.wait_resume(done, None) is None
    assert checks.wait_resume(res, m.EXECUTOR_TO_WORKER) is None       # not this direction
    assert checks.execute(ex, m.EXECUTOR_TO_WORKER) is None
    assert checks.completed(done, m.WORKER_TO_EXECUTOR) is None
    for f in (checks.route, checks.completed, checks.execute, checks.wait_resume):
        assert f([], None) is None and f("x", None) is None
