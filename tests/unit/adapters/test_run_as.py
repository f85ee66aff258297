"""EXECUTOR_USER: checked only where a root Worker would switch to it."""
import os

import pytest

from blockx.adapters.executor.run_as import executor_run_as_user, run_as_problem

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="only a root Worker switches users")


@root_only
def test_a_root_worker_checks_the_user_and_names_the_setting():
    assert run_as_problem("nobody") is None
    assert run_as_problem("root") is None                    # on purpose, warned about at start
    assert "no user 'no-such-user-bx'" in run_as_problem("no-such-user-bx")
    assert "executorUser (EXECUTOR_USER)" in run_as_problem("")


@root_only
def test_who_process_mode_executors_become_under_a_root_worker():
    assert executor_run_as_user("process", "nobody") == "nobody"
    assert executor_run_as_user("process", "root") == ""
    assert executor_run_as_user("sandbox", "nobody") == ""      # bwrap maps its own uid


def test_a_worker_that_is_not_root_keeps_its_user(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert run_as_problem("no-such-user-bx") is None
    assert executor_run_as_user("process", "nobody") == ""
