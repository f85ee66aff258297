"""What the dispatch actor says when something goes wrong in it.

A BindError is an everyday outcome (no free context, executor gone): the call
is re-queued quietly. Any other exception from the bind step is a bug: it is
logged with its traceback at ERROR (and the call is still rolled back so the
task does not hang). An epilogue that never quiesces is cut off at its bound
with an ERROR, never silently."""
from __future__ import annotations

import logging

from blockx.adapters import orchestrator_dispatch
from blockx.adapters.executor.errors import BindError
from blockx.core.dispatcher_commands import UnbindCall

from .harness import outputs, until


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

    disp.epilogue = endless
    try:
        with caplog.at_level(logging.ERROR, logger="blockx.dispatch"):
            h.orch.post(lambda n: [])
    finally:
        del disp.epilogue
    assert len(rounds) == orchestrator_dispatch.EPILOGUE_MAX_ROUNDS
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "epilogue" in errors[0].getMessage()
    assert str(orchestrator_dispatch.EPILOGUE_MAX_ROUNDS) in errors[0].getMessage()
    # The actor is still alive.
    h.submit("t", [("add", [1, 1])])
    await h.executed(1)
    h.fake.complete("t/0", 2)
    await until(lambda: h.state("t").is_terminal, what="task done after the cut-off")
