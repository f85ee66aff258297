"""The call states change only through records.set_state: interpreted, it refuses
a change that records.TRANSITIONS does not list; the table lists exactly the
changes the dispatcher suite makes; validate_state() catches records that
disagree."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from blockx._fast import twin
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.dispatcher import StateInvariantError

from tests.unit.core.dispatch.harness import Harness, spec

ROOT = Path(__file__).resolve().parents[4]
SUITE = Path(__file__).resolve().parent


def _call(rec):
    return rec.CallRecord("t/0", "f", "d", "main", b"[]", b"k", 0, 0)


def test_a_forbidden_state_change_raises_in_the_interpreted_form():
    rec = twin("records", "blockx.core.dispatch")
    call = _call(rec)
    rec.set_state(call, rec.RUNNING)
    rec.set_state(call, rec.DONE)
    with pytest.raises(rec.StateTransitionError, match="t/0: DONE -> RUNNING"):
        rec.set_state(call, rec.RUNNING)
    assert call.state == rec.DONE
    fresh = _call(rec)
    with pytest.raises(rec.StateTransitionError, match="READY -> WAITING"):
        rec.set_state(fresh, rec.WAITING)
    with pytest.raises(rec.StateTransitionError, match="READY -> READY"):
        rec.set_state(fresh, rec.READY)


def test_the_table_lists_exactly_the_changes_the_dispatcher_suite_makes(tmp_path):
    out = tmp_path / "seen.json"
    env = {**os.environ, "BLOCKX_NO_EXTENSIONS": "1", "BLOCKX_TRANSITIONS_OUT": str(out)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                          "--deselect", f"{Path(__file__).resolve().relative_to(ROOT)}::"   # not itself again
                          "test_the_table_lists_exactly_the_changes_the_dispatcher_suite_makes",
                          str(SUITE)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    seen = {tuple(p) for p in json.loads(out.read_text())}
    table = twin("records", "blockx.core.dispatch").TRANSITIONS
    assert seen <= table, f"changes made but not allowed: {seen - table}"
    assert seen == table, f"allowed but never made by the suite: {table - seen}"


def test_validate_state_names_records_that_disagree():
    h = Harness(DispatcherConfig(), executors=("e1",))
    h.submit("t", [spec("f", 1), spec("f", 2)])
    h.epilogue()
    h.core.validate_state()
    view = h.core.executors.view("e1")
    view.local_inflight += 1
    with pytest.raises(StateInvariantError, match="executor e1: local_inflight 3 but 2 calls bound"):
        h.core.validate_state()
    view.local_inflight -= 1
    task = h.core.tasks.by_id["t"]
    task.inflight -= 1
    with pytest.raises(StateInvariantError, match="task t: inflight 1 but 2 roots running"):
        h.core.validate_state()


def test_a_waiting_call_that_fails_retryably_goes_back_to_ready():
    # WAITING -> READY: the one change only a retry of a waiting call makes (the
    # suite-wide table test relies on it being made on every run, not by chance).
    h = Harness(DispatcherConfig(), executors=("e1",))
    h.submit("t", [spec("f", 1)])
    attempt = h.attempt("t/0")
    h.feed(h.core.lifecycle.handle_call_waiting("t/0", attempt, h.now))
    assert h.core.tasks.call_state("t/0") == "WAITING"
    h.fail("t/0", "EXECUTOR_LOST", retryable=True)
    assert h.core.tasks.call_state("t/0") == "READY"
    h.core.validate_state()
