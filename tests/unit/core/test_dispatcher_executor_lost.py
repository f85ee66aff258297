"""Executor loss: every in-flight call on it fails retryably (EXECUTOR_LOST),
subtrees are cancelled, other executors are untouched."""
from blockx.core.dispatch.commands import (
    ArmCallRetry, BindCall, CancelCallCmd, SubcallDone, UnbindCall)
from blockx.core.dispatch.config import DispatcherConfig

from tests.unit.core.test_dispatcher_harness import Harness, of_type, spec


def _two_executors(**cfg):
    cfg.setdefault("default_retry_jitter_percent", 0)
    return Harness(DispatcherConfig(**cfg), executors=("a", "b"), contexts=10)


def test_inflight_calls_on_the_lost_executor_are_retried_elsewhere():
    h = _two_executors()
    h.submit("t", [spec("f", i) for i in range(4)])
    on_a = sorted(c for c, cmd in h.live.items() if cmd.executor_id == "a")
    on_b = sorted(c for c, cmd in h.live.items() if cmd.executor_id == "b")
    assert on_a and on_b
    cmds = h.lose("a")
    assert sorted(c.call_id for c in of_type(cmds, UnbindCall)) == on_a
    assert sorted((c.call_id, c.fire_at_ms) for c in of_type(cmds, ArmCallRetry)) == [
        (c, 10) for c in on_a]
    assert h.core.executor_view("a").healthy is False
    assert h.core.executor_view("a").local_inflight == 0
    assert sorted(h.live) == on_b                 # b's calls untouched
    h.advance(10)
    for c in on_a:
        assert h.live[c].executor_id == "b" and h.live[c].attempt_seq == 2
    for c in list(h.live):
        h.complete(c)
    t = h.converged["t"]
    assert t.ok and len(t.outputs) == 4 and t.call_retries == len(on_a)


def test_late_frames_from_the_lost_executor_are_stale():
    h = _two_executors()
    h.submit("t", [spec("f", 1)])
    eid = h.live["t/0"].executor_id
    h.lose(eid)
    assert h.core.handle_call_completed("t/0", 1, b"late", 0, h.now) == []
    assert h.core.handle_call_failed("t/0", 1, "EXECUTOR_LOST", True, "", h.now) == []
    h.advance(10)
    assert h.attempt("t/0") == 2


def test_losing_every_attempt_fails_the_task_retryably():
    h = Harness(DispatcherConfig(default_retry_jitter_percent=0), executors=("a",))
    h.submit("t", [spec("f", 1)])
    for _ in range(2):
        h.lose("a")
        h.set_executor("a", usable_contexts=8)
        h.advance(1000)
    h.lose("a")
    c = h.converged["t"]
    assert not c.ok and c.retryable and "EXECUTOR_LOST" in c.failure_message


def test_subtree_on_the_lost_executor_is_cancelled_not_resumed():
    h = _two_executors()
    h.submit("t", [spec("f", 1)])
    eid = h.live["t/0"].executor_id
    child, _ = h.subcall("t/0", "g", 1)
    grand, _ = h.subcall(child, "k", 1)
    assert h.core.executor_calls(eid) == ["t/0", child, grand]
    cmds = h.lose(eid)
    assert sorted(c.call_id for c in of_type(cmds, CancelCallCmd)) == sorted([child, grand])
    assert of_type(cmds, SubcallDone) == []
    assert h.core.executor_calls(eid) == []
    assert of_type(cmds, ArmCallRetry) == [ArmCallRetry("t/0", 10, True)]


def test_an_unconfirmed_bind_on_the_lost_executor_is_rolled_back():
    h = Harness(executors=("a",))
    p = h.core.prepare_call_phase("t", [spec("f", 1)])
    h.core.commit_call_phase(p, 0)
    assert of_type(h.core.dispatch(0), BindCall)
    cmds = h.core.handle_executor_lost("a", 0)
    assert cmds == [ArmCallRetry("t/0", 0, False)]
    assert h.core.call_attempts("t/0") == 0


def test_unknown_executor_loss_is_ignored():
    h = Harness()
    assert h.core.handle_executor_lost("ghost", 0) == []


def test_lost_executor_is_not_selected_until_a_snapshot_restores_it():
    h = Harness(executors=("a",))
    h.lose("a")
    h.submit("t", [spec("f", 1)])
    assert h.live == {}
    h.set_executor("a", usable_contexts=8, heartbeat_seq=1)
    assert list(h.live) == ["t/0"]


def test_a_loss_detail_reaches_the_failure_message():
    # The sandbox names the limit that killed an executor.
    h = Harness(DispatcherConfig(default_retry_jitter_percent=0), executors=("a",))
    h.submit("t", [spec("f", 1)], retry=(1, 0, 0))
    h.core.handle_executor_lost("a", h.now, "killed by its memory limit")
    h.advance(0)
    c = h.converged["t"]
    assert "EXECUTOR_LOST: executor a lost: killed by its memory limit" in c.failure_message, c.failure_message
