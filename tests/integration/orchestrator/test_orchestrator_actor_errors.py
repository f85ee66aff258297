"""What the dispatch actor says when something goes wrong in it.

A BindError is an everyday outcome (no free context, executor gone): the call
is re-queued quietly. Any other exception from the bind step is a bug: it is
logged with its traceback at ERROR (and the call is still rolled back so the
task does not hang); likewise for the CancelCall path, where only a gone
executor is an everyday outcome. An epilogue that never quiesces is cut off at its bound
with an ERROR, never silently."""
from __future__ import annotations

import logging

from blockx.adapters import dispatch_actor
from blockx.adapters.executor.errors import BindError, ExecutorGone
from blockx.core.dispatch.commands import UnbindCall

from .harness import outputs, settle, spy_dispatcher, until


async def test_an_expected_bind_error_is_not_logged_as_an_error(make_harness, caplog):
    h = await make_harness(executors=("exec-1", "exec-2"))
    h.fake.bind_faults.append(BindError("gone", executor_id="exec-1", reason="executor_unknown"))
    with caplog.at_level(logging.DEBUG, logger="blockx.dispatch"):
        h.submit("t", [("add", [1, 2])])
        await h.executed(1)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    h.fake.complete("t/0", 3)
    assert outputs(await h.terminal("t")) == [3]


async def test_an_unexpected_bind_exception_is_logged_with_its_traceback(make_harness, caplog):
    h = await make_harness(executors=("exec-1", "exec-2"))
    h.fake.bind_faults.append(RuntimeError("reservation table corrupted"))
    with caplog.at_level(logging.DEBUG, logger="blockx.dispatch"):
        h.submit("t", [("add", [1, 2])])
        sent = await h.executed(1)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "t/0" in errors[0].getMessage() and "exec-1" in errors[0].getMessage()
    assert errors[0].exc_info is not None and errors[0].exc_info[0] is RuntimeError
    # Rolled back like any failed bind: the call went to the other executor.
    assert sent[0].executor_id == "exec-2"
    h.fake.complete("t/0", 3)
    assert outputs(await h.terminal("t")) == [3]


async def test_an_epilogue_that_never_quiesces_is_cut_off_with_an_error(make_harness, caplog):
    h = await make_harness()
    disp = h.disp
    rounds = []

    def endless(now):
        rounds.append(now)
        return [UnbindCall("ghost", "exec-1")]

    real = disp.lifecycle
    spy_dispatcher(disp, {("lifecycle", "epilogue"): lambda orig: endless})
    try:
        with caplog.at_level(logging.ERROR, logger="blockx.dispatch"):
            h.orch.post(lambda n: [])
    finally:
        disp.lifecycle = real
    assert len(rounds) == dispatch_actor.EPILOGUE_MAX_ROUNDS
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "epilogue" in errors[0].getMessage()
    assert str(dispatch_actor.EPILOGUE_MAX_ROUNDS) in errors[0].getMessage()
    # The actor is still alive.
    h.submit("t", [("add", [1, 1])])
    await h.executed(1)
    h.fake.complete("t/0", 2)
    await until(lambda: h.state("t").is_terminal, what="task done after the cut-off")


async def _timed_out_with_two_calls_in_flight(h) -> None:
    h.submit("t", [("add", [1, 0]), ("add", [2, 0])], timeout_ms=1000)
    await h.executed(2)
    h.clock.advance(1000)
    h.orch.tick()                     # TIMED_OUT: both calls get CancelCallCmd


async def test_an_unexpected_exception_marking_a_reservation_draining_is_logged(make_harness,
                                                                               caplog):
    h = await make_harness()
    f = h.fake
    real = f.mark_draining

    def broken(call_id, executor_id):
        if call_id == "t/0":
            raise RuntimeError("reservation table corrupted")
        real(call_id, executor_id)

    f.mark_draining = broken
    with caplog.at_level(logging.DEBUG, logger="blockx.dispatch"):
        await _timed_out_with_two_calls_in_flight(h)
        await until(lambda: [c.call_id for c in f.cancels] == ["t/1"], what="CancelCall t/1")
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "t/0" in errors[0].getMessage()
    assert errors[0].exc_info[0] is RuntimeError
    assert ("mark_draining", "t/1", "exec-1") in f.trace   # the rest of the batch still ran


async def test_a_cancel_to_a_gone_executor_is_quiet_but_an_unexpected_error_is_logged(
        make_harness, caplog):
    h = await make_harness()
    f = h.fake

    async def send_cancel_call(executor_id, call_id, reason, attempt_seq):
        if call_id == "t/0":
            raise ExecutorGone(executor_id)
        raise RuntimeError("encoder bug")

    f.send_cancel_call = send_cancel_call
    with caplog.at_level(logging.DEBUG, logger="blockx.dispatch"):
        await _timed_out_with_two_calls_in_flight(h)
        await settle()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "t/1" in errors[0].getMessage()
    assert errors[0].exc_info[0] is RuntimeError
