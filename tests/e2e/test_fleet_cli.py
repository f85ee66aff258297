"""Function code from etcd (FUNCTIONS_SOURCE=etcd) and the fleet commands
(`blockx functions push|list`, `blockx workers`, `blockx submit --etcd`) against a
real etcd and real workers."""
import hashlib
import io
import json
import pathlib
import shutil
import time

import pytest

from blockx.cli import main
from blockx.cli.fleet import ETCD_MAX_REQUEST_BYTES
from tests.support.etcd import EtcdServer
from tests.support.fleet import registry, start_workers
from tests.support.worker import EXAMPLES, outputs

pytestmark = pytest.mark.e2e
HERE = pathlib.Path(__file__).resolve().parent
FN_PREFIX = "/blockx/functions/"


@pytest.fixture(scope="module")
def etcd():
    server = EtcdServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


def run_cli(argv, capsys):
    code = main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def functions_in_etcd(etcd, capsys):
    code, out, _ = run_cli(["functions", "list", "--etcd", etcd.endpoint, "--json"], capsys)
    assert code == 0
    return json.loads(out)


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


def test_push_while_tasks_run_and_a_bad_push_writes_nothing(etcd, tmp_path, capsys):
    v1 = code_dir(tmp_path, 1)
    code, out, err = run_cli(["functions", "push", str(v1), "--etcd", etcd.endpoint], capsys)
    assert code == 0, err
    assert out.startswith("pushed 4 function(s) to /blockx/functions/ at revision ")
    listed = functions_in_etcd(etcd, capsys)
    assert {f["modRevision"] for f in listed["functions"]} == {int(out.split()[-1])}, "one transaction"
    assert {f["functionId"]: (f["digest"], f["bytes"]) for f in listed["functions"]} == {
        p.stem: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_size)
        for p in v1.glob("*.py") if not p.name.startswith("_")}

    empty = tmp_path / "empty"      # FUNCTIONS_DIR is not read with FUNCTIONS_SOURCE=etcd
    empty.mkdir()
    workers = start_workers(etcd, 2, empty, {"FUNCTIONS_SOURCE": "etcd"})
    try:
        for i, w in enumerate(workers):
            assert w.find_event("function_code_etcd")["loaded"] is True
            w.submit_calls(f"v1-{i}", [("ver", [])])
            assert outputs(w.wait_terminal(f"v1-{i}")) == [1]
        # Pinned to the first code epoch: `ver` is called (as a subcall) only after the push.
        for i, w in enumerate(workers):
            w.submit_calls(f"pinned-{i}", [("ver_later", [1500])])
        time.sleep(0.3)
        v2 = code_dir(tmp_path, 2)
        code, out, err = run_cli(["functions", "push", str(v2), "--etcd", etcd.endpoint], capsys)
        assert code == 0, err
        time.sleep(0.3)
        for i, w in enumerate(workers):
            w.submit_calls(f"v2-{i}", [("ver", [])])
            assert outputs(w.wait_terminal(f"v2-{i}")) == [2], "a task activated after the push runs the new code"
        for i, w in enumerate(workers):
            res = w.wait_terminal(f"pinned-{i}")
            assert res.state == 3, res.failure_message
            assert outputs(res) == [1], "a running task finishes on the code it pinned"

        # Bad directories: refused with the reason, and nothing is written.
        before = functions_in_etcd(etcd, capsys)
        bad_name = code_dir(tmp_path, 3)
        (bad_name / "bad name.py").write_text("def main():\n    return 0\n")
        bad_utf8 = code_dir(tmp_path, 4)
        (bad_utf8 / "latin.py").write_bytes(b"# caf\xe9\ndef main():\n    return 0\n")
        too_big = code_dir(tmp_path, 5)
        (too_big / "huge.py").write_text("X = '" + "x" * ETCD_MAX_REQUEST_BYTES + "'\n")
        too_big_together = code_dir(tmp_path, 6)
        for k in range(3):
            (too_big_together / f"part{k}.py").write_text("X = '" + "x" * (ETCD_MAX_REQUEST_BYTES // 2) + "'\n")
        for d, reason in ((bad_name, "'bad name' is not a valid function id"), (bad_utf8, "latin.py: not UTF-8"),
                          (too_big, "huge.py: "), (too_big_together, "in one transaction, over etcd's request")):
            code, out, err = run_cli(["functions", "push", str(d), "--etcd", etcd.endpoint], capsys)
            assert code == 1 and out == ""
            assert "nothing pushed" in err and reason in err, err
        after = functions_in_etcd(etcd, capsys)
        # The header revision moves with the workers' heartbeats; each key's modRevision does not.
        assert after["functions"] == before["functions"], "a refused push writes nothing"
        for i, w in enumerate(workers):
            w.submit_calls(f"still-v2-{i}", [("ver", [])])
            assert outputs(w.wait_terminal(f"still-v2-{i}")) == [2]
    finally:
        for w in workers:
            w.stop()


def test_workers_table_and_submit_through_etcd(etcd, tmp_path, capsys, functions_dir):
    workers = start_workers(etcd, 2, functions_dir, {"TASK_SLOTS": "7"})
    try:
        code, out, err = run_cli(["workers", "--etcd", etcd.endpoint], capsys)
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0].split() == ["ADDRESS", "READY", "DRAINING", "SLOTS", "FREE/TOTAL", "EXECUTORS",
                                    "OK/TOTAL", "HEARTBEAT", "AGE"]
        reg = registry(etcd)
        rows = {ln.split()[0]: ln.split() for ln in lines[1:-1]}
        assert set(rows) == set(reg) == {f"127.0.0.1:{w.port}" for w in workers}
        for a, hb in reg.items():
            assert rows[a][1:5] == ["yes", "no", f"{hb['freeSlots']}/7", f"{hb['executorsHealthy']}/1"]
            assert rows[a][5].endswith("s") and float(rows[a][5][:-1]) < 5
        assert lines[-1] == "2 worker(s)"
        code, out, _ = run_cli(["workers", "--etcd", etcd.endpoint, "--json"], capsys)
        assert code == 0 and set(json.loads(out)) == set(reg)

        code, out, err = run_cli(["submit", "--etcd", etcd.endpoint, "--calls", "add:20,22"], capsys)
        assert code == 0, err
        obj = json.loads(out)
        assert obj["state"] == "SUCCEEDED" and obj["result"]["outputs"] == [42]
        assert obj["worker"] in reg and obj["attempts"] == 1
        code, out, err = run_cli(["submit", "--etcd", etcd.endpoint, "--calls", "fail:\"boom\""], capsys)
        assert code == 3 and json.loads(out)["state"] == "FAILED"
        code, out, err = run_cli(["submit", "--etcd", etcd.endpoint, "--watch", "--calls", "sleep_ms:50"], capsys)
        assert code == 0, err
        states = [json.loads(ln)["state"] for ln in out.splitlines()]
        assert states[-1] == "SUCCEEDED"
    finally:
        for w in workers:
            w.stop()


def test_commands_without_etcd_fail_clearly(capsys, tmp_path):
    from tests.support.etcd import free_port
    dead = f"127.0.0.1:{free_port()}"
    code, out, err = run_cli(["workers", "--etcd", dead, "--timeout", "0.5"], capsys)
    assert code == 1 and "error: etcd " + dead in err
    code, out, err = run_cli(["functions", "push", str(tmp_path / "nope"), "--etcd", dead], capsys)
    assert code == 2 and "is not a directory" in err         # the command line names no directory: usage


def test_function_code_survives_an_etcd_outage_and_follows_pushes_after_it(tmp_path, capsys):
    with EtcdServer() as etcd:
        code, _, err = run_cli(["functions", "push", str(code_dir(tmp_path, 1)), "--etcd", etcd.endpoint], capsys)
        assert code == 0, err
        empty = tmp_path / "empty"
        empty.mkdir()
        w, = start_workers(etcd, 1, empty, {"FUNCTIONS_SOURCE": "etcd"})
        try:
            etcd.stop()
            w.submit_calls("out-1", [("ver", [])])
            assert outputs(w.wait_terminal("out-1")) == [1], "the last code stays while etcd is down"
            etcd.start()
            code, _, err = run_cli(["functions", "push", str(code_dir(tmp_path, 2)), "--etcd", etcd.endpoint],
                                   capsys)
            assert code == 0, err
            deadline = time.monotonic() + 10
            got = None
            while got != [2] and time.monotonic() < deadline:   # the watch reconnects with a backoff
                tid = f"after-{time.monotonic()}"
                w.submit_calls(tid, [("ver", [])])
                got = outputs(w.wait_terminal(tid))
                time.sleep(0.1)
            assert got == [2], "after etcd returns the worker follows pushes again"
        finally:
            w.stop()
