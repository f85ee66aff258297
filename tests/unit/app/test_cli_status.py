"""`blockx status` / `blockx top` rendering and rates, and progress in the JSON
lines of submit / watch (the live commands run against a real worker in
tests/e2e/test_top.py and test_status.py)."""
import io

import pytest

from blockx.cli import build_parser
from blockx.cli.output import response_to_json
from blockx.cli.status_render import render_status, status_to_json
from blockx.cli.top import Rates, rates_lines, render_top
from blockx.worker.v1 import worker_pb2 as pb


def status(now_ms=10_000, succeeded=0, failed=0, completed=0, calls_failed=0, submitted=0):
    st = pb.WorkerStatus(
        worker_addr="10.0.0.7:8081", version="0.1.0", now_ms=now_ms, started_at_ms=1_000, uptime_ms=now_ms - 1_000,
        ready=True, slots=pb.SlotCounts(total=50, free=47, reserved=1, running=2), outbox_depth=3, code_epoch=4,
        etcd_state="registered",
        executors=[pb.ExecutorStatus(executor_id="exec-0", pid=4242, state="HEALTHY", healthy=True, inflight=5,
                                     runnable=2, rss_bytes=52_428_800, cpu_user_seconds=1.25,
                                     cpu_system_seconds=0.5, restarts=1, last_heartbeat_age_ms=120, capacity=128),
                   pb.ExecutorStatus(executor_id="exec-1", state="RESTARTING", last_heartbeat_age_ms=-1,
                                     restarts=3)],
        counters=pb.WorkerCounters(tasks_submitted=submitted, tasks_succeeded=succeeded, tasks_failed=failed,
                                   calls_completed=completed, calls_failed=calls_failed))
    st.tasks_by_phase.update({"PREPARING": 0, "BUILDER": 1, "CALLS": 1, "PLUGIN": 0})
    if failed:
        st.counters.tasks_failed_by_code["CALL_FAILED"] = failed
    return st


def test_status_json_has_numbers_and_every_section():
    j = status_to_json(status(failed=2, submitted=5))
    assert j["slots"] == {"total": 50, "free": 47, "reserved": 1, "running": 2}
    assert j["tasksByPhase"] == {"PREPARING": 0, "BUILDER": 1, "CALLS": 1, "PLUGIN": 0}
    e0, e1 = j["executors"]
    assert (e0["pid"], e0["rssBytes"], e0["cpuUserSeconds"], e0["lastHeartbeatAgeMs"]) == (4242, 52_428_800, 1.25, 120)
    assert (e1["healthy"], e1["state"], e1["lastHeartbeatAgeMs"]) == (False, "RESTARTING", -1)
    assert j["counters"]["tasksFailedByCode"] == {"CALL_FAILED": 2} and j["counters"]["tasksSubmitted"] == 5
    assert (j["etcdState"], j["codeEpoch"], j["outboxDepth"], j["uptimeMs"]) == ("registered", 4, 3, 9_000)


def _text(renderable, width=80) -> str:
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(renderable)
    return buf.getvalue()


def test_status_table_shows_the_header_and_one_row_per_executor_in_80_columns():
    out = _text(render_status(status()))
    assert "worker 10.0.0.7:8081" in out and "up 0m09s" in out and "etcd registered" in out
    assert "slots 2 running, 1 reserved, 47 free of 50" in out and "builder 1 calls 1" in out
    rows = [line for line in out.splitlines() if line.startswith("exec-")]
    assert rows[0].split() == ["exec-0", "HEALTHY", "4242", "5", "2", "50.0M", "1.2/0.5", "1", "120ms"]
    assert rows[1].split() == ["exec-1", "RESTARTING", "-", "0", "0", "-", "0.0/0.0", "3", "-"]
    assert all(len(line) <= 80 for line in out.splitlines())


def test_rates_are_counter_deltas_per_second():
    a = status(now_ms=10_000, succeeded=10, failed=1, completed=100, calls_failed=2, submitted=12)
    b = status(now_ms=12_000, succeeded=30, failed=3, completed=500, calls_failed=6, submitted=40)
    r = Rates.between(a, b)
    assert (r.tasks_submitted, r.tasks_finished, r.tasks_failed, r.calls, r.calls_failed) == (14, 11, 1, 202, 2)
    assert Rates.between(None, b) is None and Rates.between(b, b) is None
    assert rates_lines(r) == ["tasks/s: 14.0 submitted, 11.0 finished, 1.0 failed",
                              "calls/s: 202.0 finished, 2.0 failed, 0.0 retried"]
    screen = _text(render_top(b, r, interval=0.5))
    assert "tasks/s: 14.0 submitted" in screen and "q quit" in screen
    assert len(screen.splitlines()) <= 24 and all(len(line) <= 80 for line in screen.splitlines())


def test_status_and_top_take_worker_or_addr():
    p = build_parser()
    assert p.parse_args(["status", "--worker", "h:1"]).addr == "h:1"
    assert p.parse_args(["status", "--addr", "h:2", "--json"]).json
    ns = p.parse_args(["top", "--worker", "h:3", "--interval", "0.2"])
    assert (ns.addr, ns.interval) == ("h:3", 0.2)


def test_top_refuses_a_non_positive_interval(capsys):
    from blockx.cli.exit import EXIT_USAGE, UsageError
    from blockx.cli.top import cmd_top

    with pytest.raises(SystemExit) as ei:                  # the parser refuses it (exit 2)
        build_parser().parse_args(["top", "--interval", "0"])
    assert ei.value.code == EXIT_USAGE and "argument --interval" in capsys.readouterr().err
    ns = build_parser().parse_args(["top"])
    ns.interval = 0                                        # a namespace built by hand: cmd_top checks too
    with pytest.raises(UsageError, match="--interval must be > 0"):
        cmd_top(ns)


def test_updates_print_their_progress_in_json():
    upd = pb.TaskUpdate(task_id="t", state=pb.TASK_STATE_RUNNING,
                        progress=pb.TaskProgress(calls_total=10, calls_done=4, calls_failed=1, calls_retried=2))
    assert response_to_json(upd)["progress"] == {"callsTotal": 10, "callsDone": 4, "callsFailed": 1,
                                                 "callsRetried": 2}
    assert "progress" not in response_to_json(pb.TaskUpdate(task_id="t", state=pb.TASK_STATE_RUNNING))
    assert "progress" not in response_to_json(pb.GetTaskResultResponse(task_id="t", state=pb.TASK_STATE_RUNNING))
