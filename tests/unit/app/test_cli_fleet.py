"""The fleet commands' pure parts: the workers table and the push checks (no etcd)."""
import pytest

from blockx.cli import build_parser
from blockx.cli.exit import CLIError
from blockx.cli.fleet import collect_functions, workers_table
from blockx.client.registry import WorkerInfo


def test_workers_table():
    ws = [WorkerInfo("10.0.0.2:8081", ready=False, draining=True, free_slots=0, task_slots=50, executors_healthy=0,
                     executors_total=8, updated_at_ms=9_000),
          WorkerInfo("10.0.0.1:8081", ready=True, free_slots=46, task_slots=50, executors_healthy=8, executors_total=8,
                     updated_at_ms=9_750)]
    assert workers_table(ws, now_ms=10_000).splitlines() == [
        "ADDRESS        READY  DRAINING  SLOTS FREE/TOTAL  EXECUTORS OK/TOTAL  HEARTBEAT AGE",
        "10.0.0.1:8081  yes    no        46/50             8/8                 0.2s",
        "10.0.0.2:8081  no     yes       0/50              0/8                 1.0s",
        "2 worker(s)",
    ]


def test_push_collects_py_files_and_skips_private_ones(tmp_path):
    (tmp_path / "add.py").write_text("def main(a, b):\n    return a + b\n")
    (tmp_path / "_helper.py").write_text("x = 1\n")
    (tmp_path / ".hidden.py").write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("hi\n")
    (tmp_path / "pkg.py").mkdir()
    assert collect_functions(str(tmp_path), "/p/", 1 << 20) == [("/p/add", b"def main(a, b):\n    return a + b\n")]


def test_push_lists_every_problem_and_refuses(tmp_path):
    (tmp_path / "ok.py").write_text("x = 1\n")
    (tmp_path / "bad name.py").write_text("x = 1\n")
    (tmp_path / "latin.py").write_bytes(b"x = '\xe9'\n")
    (tmp_path / "big.py").write_text("x" * 2000)
    with pytest.raises(CLIError) as ei:
        collect_functions(str(tmp_path), "/p/", 1000)
    msg = str(ei.value)
    assert msg.startswith("nothing pushed:")
    assert "'bad name' is not a valid function id" in msg and "latin.py: not UTF-8" in msg
    assert "big.py: 2000 bytes, over etcd's request size limit (1000)" in msg
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CLIError, match="no <functionId>.py files"):
        collect_functions(str(empty), "/p/", 1000)


def test_etcd_default_comes_from_blockx_etcd(monkeypatch):
    monkeypatch.setenv("BLOCKX_ETCD", "10.1.1.1:2379")
    ns = build_parser().parse_args(["workers"])
    assert ns.etcd == "10.1.1.1:2379"
    ns = build_parser().parse_args(["submit", "--etcd", "--calls", "add:1,2"])
    assert ns.etcd == "10.1.1.1:2379"
    ns = build_parser().parse_args(["submit", "--calls", "add:1,2"])
    assert ns.etcd is None, "without --etcd, submit goes to --addr as before"


def test_a_redis_push_has_the_same_checks_with_the_workers_source_limit(tmp_path):
    (tmp_path / "ok.py").write_text("x = 1\n")
    (tmp_path / "bad name.py").write_text("x = 1\n")
    (tmp_path / "big.py").write_text("x" * 2001)
    (tmp_path / "fits.py").write_text("x" * 2000)
    with pytest.raises(CLIError) as ei:
        collect_functions(str(tmp_path), "", None, max_source_bytes=2000)
    msg = str(ei.value)
    assert "'bad name' is not a valid function id" in msg
    assert "big.py: 2001 bytes, over the Worker's limit for one function source (2000)" in msg
    assert "fits.py" not in msg
    (tmp_path / "bad name.py").unlink()
    (tmp_path / "big.py").unlink()
    assert [k for k, _ in collect_functions(str(tmp_path), "", None, max_source_bytes=2000)] == ["fits", "ok"]


def test_functions_push_and_list_take_redis_and_its_prefix():
    ns = build_parser().parse_args(["functions", "push", "--redis", "redis://127.0.0.1:6379/0", "d"])
    assert ns.redis == "redis://127.0.0.1:6379/0" and ns.prefix is None and ns.directory == "d"
    ns = build_parser().parse_args(["functions", "list", "--redis", "redis://h:1/2", "--prefix", "team:fn:"])
    assert ns.redis == "redis://h:1/2" and ns.prefix == "team:fn:"
    assert build_parser().parse_args(["functions", "list"]).redis is None
