"""Safe production defaults, tried as an attacker would against real workers.

- A production worker (block, bundle) with no function source configured serves
  none of the shipped examples (`sql_query` would run any read-only SQL a client
  sends on every configured data source) and no `devstub` IO backend; the dev
  profile still serves both.
- Error kinds chosen by user code cannot mint unbounded metric series or put
  control characters into labels.
- Strings others chose (etcd keys: worker addresses, function ids) reach the
  terminal escaped through the fleet commands (status / top / trace / the error
  line: tests/unit/app/test_cli_text.py).
- The state directory and the DuckDB file in it are private whatever the umask.

Each attack case fails on the code before the change (examples and devstub
served by default, one series per error kind, raw ESC on the terminal, 0777/0666
under umask 0). The dev-profile and README cases guard the other side: what a
new user types (the tour on `dev`, the examples named on `block`) still runs."""
import asyncio
import json
import os
import re
import shlex
import stat
import subprocess
import sys

import aetcd
import pytest

from blockx.cli import main
from tests.support.etcd import EtcdServer
from tests.support.worker import ROOT, WorkerProcess, outputs
from blockx.worker.v1 import worker_pb2 as pb

pytestmark = pytest.mark.e2e
ESC = "\x1b"


def _without_function_source(profile: str, env: dict | None = None) -> WorkerProcess:
    """A worker started the way an operator starts one: no FUNCTIONS_DIR at all."""
    w = WorkerProcess(env, profile=profile)
    w.env.pop("FUNCTIONS_DIR")
    return w


@pytest.mark.parametrize("profile", ["block", "bundle"])
def test_a_production_worker_without_a_function_source_serves_no_example(profile):
    w = _without_function_source(profile)
    try:
        w.start()
        for fid, args in (("sql_query", ["local", "SELECT 42 AS leaked"]), ("add", [1, 2]), ("echo_io", [{"k": 1}])):
            w.submit_calls(f"t-{fid}", [(fid, args)])
            res = w.wait_terminal(f"t-{fid}")
            assert res.state == pb.TASK_STATE_FAILED and res.failure_code == "CALL_FAILED", (fid, res)
            assert f"function {fid!r} not found" in res.failure_message, res.failure_message
            assert "no function source is configured: set FUNCTIONS_DIR" in res.failure_message
        hint = w.find_event("function_source_missing")
        assert hint is not None and "FUNCTIONS_DIR" in hint["message"], "one clear line at start"
        assert len(w.events_named("function_source_missing")) == 1
    finally:
        w.stop()


@pytest.mark.parametrize("profile", ["block", "bundle"])
def test_a_production_worker_serves_no_devstub_backend(profile, tmp_path):
    fdir = tmp_path / "fn"
    fdir.mkdir()
    (fdir / "probe_io.py").write_text(
        "from blockx_executor import sdk\n\n\ndef main():\n    return sdk.io('devstub', {'op': 'echo'})\n")
    w = WorkerProcess(profile=profile, functions_dir=fdir)
    try:
        w.start()
        w.submit_calls("t-io", [("probe_io", [])])
        res = w.wait_terminal("t-io")
        assert res.state == pb.TASK_STATE_FAILED, outputs(res) if res.outputs else res
        assert "unknown IO backend 'devstub' (this Worker serves: sql)" in res.failure_message, res.failure_message
        assert w.find_event("function_source_missing") is None        # FUNCTIONS_DIR was configured
    finally:
        w.stop()


def test_the_dev_profile_keeps_the_examples_and_the_devstub():
    w = _without_function_source("dev")
    try:
        w.start()
        assert w.find_event("function_source_missing") is None
        w.submit_calls("t-dev", [("add", [1, 2]), ("echo_io", [{"k": 1}, "hi"])])
        res = w.wait_terminal("t-dev")
        assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
        assert outputs(res)[0] == 3 and outputs(res)[1]["upper"] == "HI"
    finally:
        w.stop()


def _series(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{")]


def test_error_kinds_chosen_by_user_code_keep_the_metric_series_bounded(start_worker):
    w = start_worker()
    kinds = [f"KIND_{i}" for i in range(150)] + [f"{ESC}[2J{ESC}]0;owned{chr(7)}", "a b", 'q"uote', "x" * 300,
                                                  "\r\nblockx_fake_metric 1"]
    w.submit_calls("t-flood", [("fail_kind", [k]) for k in kinds], policy=pb.CALL_FAILURE_POLICY_CONTINUE)
    res = w.wait_terminal("t-flood", timeout=60)
    assert res.state == pb.TASK_STATE_FAILED and res.statistic.calls_failed == len(kinds)
    text = w.metrics_text()
    failed = _series(text, "blockx_calls_failed_total")
    assert len(failed) <= 64 + 12, f"{len(failed)} series for one label"
    labels = [re.fullmatch(r'blockx_calls_failed_total\{error_kind="([^"\\]*)"\} \S+', s).group(1) for s in failed]
    assert "other" in labels, "the kinds past the cap are counted, as `other`"
    counts = {lab: float(s.rsplit(" ", 1)[1]) for lab, s in zip(labels, failed)}
    assert sum(counts.values()) == len(kinds), "every failure is still counted"
    assert all(re.fullmatch(r"[A-Za-z0-9_.:/-]*", lab) for lab in labels), labels
    assert "blockx_fake_metric" not in text and ESC not in text


@pytest.fixture(scope="module")
def etcd():
    server = EtcdServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


def _put(etcd, key: str, value: bytes) -> None:
    async def go():
        c = aetcd.Client(*etcd.host_port, timeout=2)
        try:
            await c.put(key.encode(), value)
        finally:
            await c.close()
    asyncio.run(go())


def test_fleet_commands_print_etcd_keys_escaped(etcd, capsys):
    evil = f"10.0.0.9:1{ESC}[2J{ESC}]0;owned{chr(7)}\r"
    _put(etcd, "/blockx/workers/" + evil, json.dumps({"ready": True, "taskSlots": 4, "freeSlots": 4}).encode())
    _put(etcd, f"/blockx/functions/f{ESC}[31mred", b"def main():\n    return 1\n")
    assert main(["workers", "--etcd", etcd.endpoint]) == 0
    out = capsys.readouterr().out
    assert ESC not in out and "\r" not in out and chr(7) not in out
    assert "10.0.0.9:1\\x1b[2J\\x1b]0;owned\\x07\\x0d" in out
    assert main(["functions", "list", "--etcd", etcd.endpoint]) == 0
    out = capsys.readouterr().out
    assert ESC not in out and "f\\x1b[31mred" in out


def test_the_state_dir_and_its_database_are_private_whatever_the_umask(tmp_path):
    state = tmp_path / "state"
    w = WorkerProcess({"STATE_DIR": str(state)}, profile="block")
    old = os.umask(0)              # the worker inherits the most permissive umask there is
    try:
        w.start()
    finally:
        os.umask(old)
    try:
        w.submit_calls("t-db", [("echo", [{"id": 1, "x": 2}])],
                       result_handler=("tableUpserts", {"target": "local", "table": "t", "key": ["id"],
                                                        "createTable": True}))
        res = w.wait_terminal("t-db")
        assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
        assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(state / "local.duckdb").st_mode) == 0o600
        sock_dir = os.path.dirname(w.env["EXECUTOR_SOCKET_PATH"])
        assert stat.S_IMODE(os.stat(sock_dir).st_mode) == 0o700
    finally:
        w.stop()


def test_top_on_a_real_terminal_shows_the_workers_strings_escaped(start_worker, tmp_path):
    # The worker's address is a string the worker sends; here it carries a screen
    # clear and a colour change. In tmux, the raw sequence would clear the pane
    # and the literal text would never show; escaped, it reads as sent.
    from tests.e2e.test_top import _top, _wait_rc

    w = start_worker({"WORKER_ADDR": f"w{ESC}[2J{ESC}[8mhidden:8081"}, executors=1)
    tmux, rc = _top(w, tmp_path, "evil", 120, 30)
    try:
        screen = tmux.wait_screen(lambda t: "HEALTHY" in t, what="the executor")
        assert "worker w\\x1b[2J\\x1b[8mhidden:8081" in screen, screen
        tmux.keys("q")
        assert _wait_rc(rc) == "0"
    finally:
        tmux.kill()


def _readme_sh_blocks(after: str) -> list[str]:
    readme = (ROOT / "README.md").read_text()
    # the words of `after` in order, however the paragraph is wrapped
    at = re.search(r"\s+".join(map(re.escape, after.split())), readme)
    assert at, f"README.md no longer says {after!r}"
    return re.findall(r"```sh[^\n]*\n(.*?)```", readme[at.end():], re.S)


def _cli(w, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "blockx", args[0], "--addr", f"127.0.0.1:{w.port}", *args[1:]],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_the_readme_tour_submits_run_on_the_dev_profile_without_functions_dir():
    serve, first, more = _readme_sh_blocks("## A 5-minute tour")[:3]
    # `make serve` is the dev profile unless ARGS names another (tests/e2e/test_first_run.py)
    assert "make serve" in serve and "--profile" not in serve and "FUNCTIONS_DIR" not in serve
    w = _without_function_source("dev")
    try:
        w.start()
        submits = [shlex.split(line.split(" || ")[0], comments=True) for line in (first + more).splitlines()
                   if line.startswith(".venv/bin/blockx submit") and "--slot" not in line]
        assert len(submits) >= 4
        for cmd in submits:
            r = _cli(w, cmd[1:])
            want = 3 if any(t.startswith("fail:") for t in cmd) else 0     # the tour's failing call exits 3
            assert r.returncode == want, (cmd, r.stdout, r.stderr)
    finally:
        w.stop()


def test_the_readme_command_for_the_examples_on_the_block_profile_runs():
    block = next(b for b in _readme_sh_blocks("To run\nthe examples on a production profile") if "make serve" in b)
    cmd = shlex.split(block, comments=True)
    env = dict(a.split("=", 1) for a in cmd[:-3] if "=" in a)
    assert cmd[-3:] == ["make", "serve", "ARGS=--profile block"] and env["FUNCTIONS_DIR"] == "blockx/examples/functions"
    w = WorkerProcess({**env, "FUNCTIONS_DIR": str(ROOT / env["FUNCTIONS_DIR"])}, profile="block")
    try:
        w.start()
        r = _cli(w, ["submit", "--calls", "add:1,2", "--compact"])
        assert r.returncode == 0 and json.loads(r.stdout)["result"]["outputs"] == [3], r.stdout + r.stderr
    finally:
        w.stop()
