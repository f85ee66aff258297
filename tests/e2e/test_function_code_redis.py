"""Function code from Redis (FUNCTIONS_SOURCE=redis) and `blockx functions push|list --redis`
against a real redis-server and real workers: pushes followed by new tasks while running
tasks keep their pinned code, Redis killed and back, Redis down at start, bad pushes refused."""
import hashlib
import json
import pathlib
import shutil
import statistics
import time

import pytest

from blockx.cli import main
from tests.support.redis import RedisServer
from tests.support.worker import EXAMPLES, WorkerProcess, outputs

pytestmark = pytest.mark.e2e
HERE = pathlib.Path(__file__).resolve().parent
PREFIX = "blockx:functions:"
SUCCEEDED = 3


@pytest.fixture
def redis():
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


def run_cli(argv, capsys):
    code = main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def listed(redis, capsys):
    code, out, err = run_cli(["functions", "list", "--redis", redis.url, "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


def push(redis, d, capsys):
    code, out, err = run_cli(["functions", "push", "--redis", redis.url, str(d)], capsys)
    assert code == 0, err
    assert out.startswith(f"pushed 4 function(s) to redis {PREFIX}sources at epoch "), out
    return int(out.split()[-1])


def code_dir(tmp_path, version: int) -> pathlib.Path:
    d = tmp_path / f"code-v{version}"
    d.mkdir()
    for name in ("add.py", "sleep_ms.py"):
        shutil.copy(EXAMPLES / name, d / name)
    shutil.copy(HERE / "functions" / "ver_later.py", d / "ver_later.py")
    (d / "ver.py").write_text(f"VERSION = {version}\n\n\ndef main():\n    return VERSION\n")
    (d / "_helper.py").write_text("skipped: starts with an underscore\n")
    (d / "README.txt").write_text("not a function\n")
    return d


def redis_worker(tmp_path, redis, **env) -> WorkerProcess:
    empty = tmp_path / "empty"          # FUNCTIONS_DIR is not read with FUNCTIONS_SOURCE=redis
    empty.mkdir(exist_ok=True)
    return WorkerProcess({"FUNCTIONS_SOURCE": "redis", "FUNCTIONS_REDIS_URL": redis.url, **env},
                         functions_dir=empty)


def ver(w, tid):
    res = w.wait_terminal(w.submit_calls(tid, [("ver", [])]) and tid)
    assert res.state == SUCCEEDED, res.failure_message
    return outputs(res)[0]


def until_version(w, want, timeout=10.0):
    """Submit `ver` tasks until one answers ``want``; the seconds it took."""
    t0 = time.monotonic()
    n = 0
    while True:
        n += 1
        tid = f"until-{want}-{n}-{time.monotonic()}"
        res = w.wait_terminal(w.submit_calls(tid, [("ver", [])]) and tid)
        got = outputs(res)[0] if res.state == SUCCEEDED else res.failure_message
        if got == want:
            return time.monotonic() - t0
        assert time.monotonic() - t0 < timeout, f"still {got!r} after {timeout} s"
        time.sleep(0.005)


def test_push_run_push_again_new_tasks_follow_running_ones_keep_their_code(redis, tmp_path, capsys):
    v1 = code_dir(tmp_path, 1)
    epoch1 = push(redis, v1, capsys)
    got = listed(redis, capsys)
    assert got["epoch"] == epoch1 == 1
    assert {f["functionId"]: (f["digest"], f["bytes"]) for f in got["functions"]} == {
        p.stem: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_size)
        for p in v1.glob("*.py") if not p.name.startswith("_")}
    code, out, _ = run_cli(["functions", "list", "--redis", redis.url], capsys)
    assert code == 0 and out.splitlines()[-1] == "4 function(s) at epoch 1"

    w = redis_worker(tmp_path, redis).start()
    try:
        ev = w.find_event("function_code_redis")
        assert ev["loaded"] is True and ev["epoch"] == 1 and ev["url"] == redis.url
        assert ver(w, "v1") == 1
        round_trips = []
        for i in range(5):                        # a task's own round trip, without any push
            t0 = time.monotonic()
            assert ver(w, f"rt-{i}") == 1
            round_trips.append((time.monotonic() - t0) * 1000)
        latencies = []
        for version in range(2, 7):
            w.submit_calls(f"pinned-{version}", [("ver_later", [800])])     # `ver` runs after the push
            time.sleep(0.2)
            push(redis, code_dir(tmp_path, version), capsys)
            latencies.append(until_version(w, version) * 1000)
            res = w.wait_terminal(f"pinned-{version}")
            assert res.state == SUCCEEDED, res.failure_message
            assert outputs(res) == [version - 1], "a running task finishes on the code it pinned"
        with capsys.disabled():
            print(f"\npush-to-visible through a worker (CLI push returned -> a new task ran the new code), "
                  f"{len(latencies)} pushes: median {statistics.median(latencies):.1f} ms, max {max(latencies):.1f} ms; "
                  f"a task's round trip alone: median {statistics.median(round_trips):.1f} ms")
        epochs = [e["epoch"] for e in w.events_named("function_code_epoch")]
        assert epochs == [1, 2, 3, 4, 5, 6]

        # Bad directories: refused with the reason, and nothing is written (the epoch stays too).
        before = listed(redis, capsys)
        bad_name = code_dir(tmp_path, 10)
        (bad_name / "bad name.py").write_text("def main():\n    return 0\n")
        bad_utf8 = code_dir(tmp_path, 11)
        (bad_utf8 / "latin.py").write_bytes(b"# caf\xe9\ndef main():\n    return 0\n")
        too_big = code_dir(tmp_path, 12)
        (too_big / "huge.py").write_text("X = '" + "x" * (8 * 1024 * 1024) + "'\n")
        empty = tmp_path / "nothing"
        empty.mkdir()
        for d, reason in ((bad_name, "'bad name' is not a valid function id"), (bad_utf8, "latin.py: not UTF-8"),
                          (too_big, "huge.py: 8388615 bytes, over the Worker's limit for one function source"),
                          (empty, "no <functionId>.py files")):
            code, out, err = run_cli(["functions", "push", "--redis", redis.url, str(d)], capsys)
            assert code == 1 and out == ""
            assert "nothing pushed" in err and reason in err, err
        assert listed(redis, capsys) == before, "a refused push writes nothing"
        assert ver(w, "still-v6") == 6
    finally:
        w.stop()


def test_redis_killed_while_running_then_back(redis, tmp_path, capsys):
    push(redis, code_dir(tmp_path, 1), capsys)
    w = redis_worker(tmp_path, redis).start()
    try:
        w.submit_calls("pinned", [("ver_later", [1500])])
        time.sleep(0.2)
        redis.kill()
        down = w.wait_event("function_code_redis_unavailable", timeout=10)
        assert down["level"] == "warning" and down["epoch"] == 1
        assert f"Redis {redis.url} unavailable" in down["message"] and "keeping code epoch 1" in down["message"]
        assert ver(w, "during-outage") == 1, "the last snapshot serves new tasks while Redis is down"
        res = w.wait_terminal("pinned")
        assert res.state == SUCCEEDED and outputs(res) == [1], "a running task keeps its pinned code"
        time.sleep(1.0)
        assert len(w.events_named("function_code_redis_unavailable")) == 1, "one line per outage"

        redis.start()                              # back, empty (no persistence)
        w.wait_event("function_code_redis_back", timeout=10)
        assert w.find_event("function_code_redis_empty") is not None
        assert ver(w, "back-empty") == 1, "an empty Redis does not empty the worker"
        assert push(redis, code_dir(tmp_path, 2), capsys) == 1
        until_version(w, 2)
        assert [e["epoch"] for e in w.events_named("function_code_epoch")] == [1, 2]
    finally:
        w.stop()


def test_redis_down_at_start_the_worker_serves_and_follows_once_redis_is_up(tmp_path, capsys):
    server = RedisServer()
    server.reserve_port()
    w = redis_worker(tmp_path, server)
    try:
        w.start()                                   # serving although Redis is not there
        ev = w.find_event("function_code_redis")
        assert ev["loaded"] is False and ev["level"] == "warning" and ev["epoch"] == 0
        assert "not reachable yet: no functions until it answers" in ev["message"]
        assert w.find_event("function_code_redis_unavailable") is not None
        res = w.wait_terminal(w.submit_calls("no-code", [("add", [1, 2])]) and "no-code")
        assert res.state != SUCCEEDED
        assert "not found in code epoch 0" in res.failure_message and f"redis {server.url}" in res.failure_message
        server.start()
        push(server, code_dir(tmp_path, 1), capsys)
        until_version(w, 1)
        res = w.wait_terminal(w.submit_calls("add", [("add", [20, 22])]) and "add")
        assert outputs(res) == [42]
    finally:
        w.stop()
        server.close()


def test_push_and_list_without_redis_fail_clearly(tmp_path, capsys):
    server = RedisServer()
    server.reserve_port()
    code, out, err = run_cli(["functions", "list", "--redis", server.url, "--timeout", "0.5"], capsys)
    assert code == 1 and f"error: redis {server.url}: ConnectionError" in err, err
    code, out, err = run_cli(["functions", "push", "--redis", server.url, str(code_dir(tmp_path, 1))], capsys)
    assert code == 1 and f"error: redis {server.url}: ConnectionError" in err, err
    server.close()


def test_the_docs_redis_example_runs(redis, capsys):
    """docs/fleet.md's commands, against this test's Redis instead of 127.0.0.1:6379."""
    import re
    import shlex
    import subprocess
    import sys

    from tests.support.worker import ROOT

    page = (ROOT / "docs" / "fleet.md").read_text().split("## Function code from Redis", 1)[1]
    block = re.findall(r"```sh[^\n]*\n(.*?)```", page, re.S)[0].replace("redis://127.0.0.1:6379/0", redis.url)
    lines = [ln for ln in block.replace("\\\n", " ").splitlines() if ln and not ln.lstrip().startswith("#")]
    pushes = [shlex.split(ln, comments=True) for ln in lines if "functions push" in ln]
    serve = next(shlex.split(ln, comments=True) for ln in lines if "blockx serve" in ln)
    assert len(pushes) == 1 and serve[-1] == "&" and serve[-2] == "serve"
    r = subprocess.run([sys.executable, "-m", "blockx", *pushes[0][1:]], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.startswith("pushed 10 function(s) to redis blockx:functions:sources"), r
    env = dict(a.split("=", 1) for a in serve if "=" in a and not a.startswith("-"))
    assert env["FUNCTIONS_SOURCE"] == "redis" and env["FUNCTIONS_REDIS_URL"] == redis.url
    w = WorkerProcess({**env, "FUNCTIONS_DIR": ""}, profile="block")
    try:
        w.start()
        res = w.wait_terminal(w.submit_calls("readme", [("add", [1, 2])]) and "readme")
        assert outputs(res) == [3]
        code, out, err = run_cli(["functions", "list", "--redis", redis.url], capsys)
        assert code == 0 and out.splitlines()[-1] == "10 function(s) at epoch 1", out + err
    finally:
        w.stop()
