"""Task progress against a real worker: a long task's updates
carry TaskProgress at most every 250 ms while its calls run, on WatchTasks and on
sessions; the terminal update carries the final counts and nothing follows it."""
from __future__ import annotations

import json
import time

import pytest

from blockx.client import connect
from blockx.worker.v1 import worker_pb2 as pb
from tests.support.session import RawSession, kind, submit

pytestmark = pytest.mark.e2e

# Two calls at a time, 60 calls of 20..79 ms (distinct arguments: identical calls
# would share one execution through the call cache): about 1.5 s of calls.
WINDOW = {"dispatcher": {"taskMaxInflightCalls": 2}}
CALLS = [("sleep_ms", [20 + i]) for i in range(60)]


@pytest.fixture(scope="module")
def slow_worker(tmp_path_factory):
    from tests.e2e.conftest import make_functions_dir
    from tests.support.worker import WorkerProcess

    tmp = tmp_path_factory.mktemp("progress")
    cfg = tmp / "worker.json"
    cfg.write_text(json.dumps(WINDOW))
    w = WorkerProcess({"WORKER_CONFIG": str(cfg), "RESULT_RETENTION_MS": "60000"},
                      functions_dir=make_functions_dir(tmp))
    w.start()
    try:
        yield w
    finally:
        w.stop()


def _progress(upd: pb.TaskUpdate):
    p = upd.progress
    return (p.calls_total, p.calls_done, p.calls_failed, p.calls_retried) if upd.HasField("progress") else None


def test_watch_tasks_streams_progress_until_the_terminal_update(slow_worker):
    w = slow_worker
    w.submit_calls("p-watch-1", CALLS)
    stream = w.stub.WatchTasks(pb.WatchTasksRequest(task_ids=["p-watch-1"]), timeout=30)
    got = []
    for upd in stream:
        got.append((time.monotonic(), upd))
    updates = [u for _, u in got]
    assert updates[-1].is_terminal and updates[-1].state == pb.TASK_STATE_SUCCEEDED
    assert sum(1 for u in updates if u.is_terminal) == 1
    assert _progress(updates[-1]) == (60, 60, 0, 0)
    running = [(t, u) for t, u in got if not u.is_terminal and u.HasField("progress")]
    assert len(running) >= 2, [_progress(u) for u in updates]
    seen = [_progress(u) for _, u in running]
    assert all(p[0] == 60 for p in seen)
    dones = [p[1] for p in seen]
    assert dones == sorted(dones) and len(set(seen)) == len(seen)      # advancing, never repeated
    assert all(u.state == pb.TASK_STATE_RUNNING for _, u in running)
    # At most one progress-only update per 250 ms tick. Arrival gaps on the client
    # can shrink when a loaded machine delays one update and not the next, so the
    # bound is on the rate over the whole run: ticks that fit its span, plus one.
    span = running[-1][0] - running[0][0]
    assert len(running) - 1 <= span / 0.25 + 1, (len(running), span)


async def test_session_watch_gets_progress_and_nothing_after_terminal(slow_worker):
    s = RawSession(slow_worker.port, keep_progress=True)
    try:
        await s.send(submit(1, "p-sess-1", CALLS[:30]))
        evs = await s.until(lambda e: kind(e) == "update" and e.update.is_terminal, timeout=30)
        ups = [e.update for e in evs if kind(e) == "update"]
        assert ups[-1].is_terminal and _progress(ups[-1]) == (30, 30, 0, 0)
        mid = [_progress(u) for u in ups[:-1] if u.HasField("progress")]
        assert mid and len(set(mid)) == len(mid) and all(p[1] < 30 for p in mid)
        # Nothing follows the terminal update: a barrier request answers with no update before it.
        assert await s.barrier(2, "p-sess-1") == []
    finally:
        await s.close()


def test_client_watch_yields_progress_and_a_finished_task_reports_final_counts(slow_worker):
    with connect(f"127.0.0.1:{slow_worker.port}") as c:
        out = c.submit(calls=CALLS[:20], task_id="p-client-1", wait=False)
        ups = list(c.watch([out.task_id]))
        assert ups[-1].is_terminal and ups[-1].progress.total == 20 and ups[-1].progress.done == 20
        assert any(u.progress is not None and not u.is_terminal for u in ups)
        # A retained result read later (a new watch) has its final counts from the statistic.
        (again,) = list(c.watch([out.task_id]))
        assert again.is_terminal and (again.progress.total, again.progress.done) == (20, 20)
        assert again.progress.fraction == 1.0


def test_cli_watch_prints_progress_json_lines_when_not_a_terminal(slow_worker):
    import subprocess
    import sys
    from pathlib import Path

    blockx = Path(sys.executable).with_name("blockx")
    # About 2.4 s of calls: the CLI starts (imports, connects) while the task is young.
    slow_worker.submit_calls("p-cli-1", [("sleep_ms", [50 + i]) for i in range(60)])
    out = subprocess.run([str(blockx), "watch", "--addr", f"127.0.0.1:{slow_worker.port}", "p-cli-1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert lines[-1]["isTerminal"] and lines[-1]["progress"] == {
        "callsTotal": 60, "callsDone": 60, "callsFailed": 0, "callsRetried": 0}
    mid = [line["progress"]["callsDone"] for line in lines[:-1] if "progress" in line]
    assert len(mid) >= 2 and mid == sorted(mid) and all(d < 60 for d in mid)


def test_cli_submit_draws_a_progress_bar_on_a_terminal(slow_worker, tmp_path):
    import re
    import sys
    from pathlib import Path

    from tests.e2e.test_top import Tmux

    blockx = Path(sys.executable).with_name("blockx")
    calls = " ".join(f"--calls sleep_ms:{20 + i}" for i in range(50))
    rc = tmp_path / "rc"
    tmux = Tmux("bar", 100, 20, f"{blockx} submit --addr 127.0.0.1:{slow_worker.port} --task-id p-bar-2 "
                                 f"--compact {calls}; echo $? > {rc}; sleep 60")
    try:
        screen = tmux.wait_screen(lambda t: re.search(r"p-bar-2 .* (\d+)/50 RUNNING", t) is not None,
                                  what="a progress bar of p-bar-2")
        done = int(re.search(r"(\d+)/50 RUNNING", screen).group(1))
        assert 0 <= done < 50
        screen = tmux.wait_screen(lambda t: '"state":"SUCCEEDED"' in t.replace("\n", ""), timeout=30,
                                  what="the terminal JSON")
        assert "/50 RUNNING" not in screen                 # the bar is gone once the task ended
        deadline = time.monotonic() + 10
        while not (rc.exists() and rc.read_text().strip()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert rc.read_text().strip() == "0"
    finally:
        tmux.kill()


def test_the_docs_progress_example_is_the_shipped_file_and_runs(start_worker):
    import os
    import pathlib
    import re
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    block = re.search(r"```python\n(# examples/progress_tour.py.*?)```", (root / "docs" / "operating.md").read_text(), re.S)
    assert block is not None, "docs/operating.md lost its progress example"
    assert block.group(1) == (root / "examples" / "progress_tour.py").read_text()
    w = start_worker(executors=2)
    env = {**os.environ, "BLOCKX_ADDR": f"127.0.0.1:{w.port}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH", "")]))}
    out = subprocess.run([sys.executable, str(root / "examples" / "progress_tour.py")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    progress = [line for line in lines if line.startswith(("RUNNING", "SUCCEEDED"))]
    assert progress[-1] == "SUCCEEDED 20/20 failed 0"
    assert all(re.fullmatch(r"RUNNING \d+/20 failed 0", line) for line in progress[:-1])
    assert "slots 50 free of 50" in lines
    assert "exec-0 HEALTHY True True" in lines and "exec-1 HEALTHY True True" in lines
    assert lines[-1] == "tasks succeeded 1 calls completed 20"
