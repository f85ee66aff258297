"""`make bench` cannot silently break: a scenario that fails is recorded in the
report's "errors", the other scenarios still run and are printed, and the run
exits 1 (bench/e2e/main.py), which fails `make bench-quick` and so `make test`.

Two ways: the runner itself with one scenario group that raises beside one that
reports (in process: no worker is needed to prove the exit path), and the real
(r) scenario broken for real, its ganache node a binary that exits at once."""
import asyncio
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.e2e import main as bench_main  # noqa: E402


async def _broken(ns, sizes, report):
    raise RuntimeError("scenario a broke on purpose")


async def _fine(ns, sizes, report):
    await asyncio.sleep(0)
    report["results"]["l_latency_budget"] = {"tasks_each_way": sizes["l_tasks"]}


def test_a_failing_scenario_fails_the_run_and_the_others_still_print(capsys):
    rc = bench_main.main(["--quick", "--only", "a,l"], groups=(("abcd", _broken), ("l", _fine)))
    out = capsys.readouterr()
    assert rc == 1
    report = json.loads(out.out)
    assert report["results"]["l_latency_budget"] == {"tasks_each_way": bench_main.SIZES["quick"]["l_tasks"]}
    assert report["errors"] == [{"scenarios": "a", "error": "RuntimeError: scenario a broke on purpose",
                                 "notes": []}]
    assert "scenario group(s) failed" in out.err and "scenario a broke on purpose" in out.err


def test_a_run_whose_scenarios_all_pass_exits_0(capsys):
    rc = bench_main.main(["--quick", "--only", "l"], groups=(("abcd", _broken), ("l", _fine)))
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["errors"] == [] and "l_latency_budget" in report["results"]


def test_quick_runs_every_scenario_by_default():
    ns = bench_main.parse_args(["--quick"])
    assert set(ns.only) == set(bench_main.ALL) == {s for letters, _ in bench_main.GROUPS for s in letters}


def test_a_real_scenario_that_breaks_makes_the_bench_exit_1(tmp_path):
    broken = tmp_path / "ganache"
    broken.write_text("#!/bin/sh\necho 'no node here' >&2\nexit 3\n")
    broken.chmod(0o755)
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "e2e_load.py"), "--quick", "--only", "r",
                          "--timeout", "120"], capture_output=True, text=True, timeout=180, cwd=ROOT,
                         env={**os.environ, "GANACHE_BIN": str(broken)})
    assert out.returncode == 1, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert [e["scenarios"] for e in report["errors"]] == ["r"], report["errors"]
    assert "failed: " in out.stderr


def test_a_run_leaves_the_callers_token_as_it_was(capsys):
    # main() sets BLOCKX_TOKEN for the bench's own clients; called in-process (as here)
    # it used to leave the bench's token behind, and every later test of the e2e run
    # that relies on the harness's token was refused UNAUTHENTICATED.
    before = os.environ.get("BLOCKX_TOKEN")
    bench_main.main(["--quick", "--only", "l"], groups=(("l", _fine),))
    capsys.readouterr()
    assert os.environ.get("BLOCKX_TOKEN") == before


def test_a_baseline_checkout_runs_its_own_executors(tmp_path):
    # --l-baseline / instructions.py --root: the executors inherit the worker's
    # PYTHONPATH, and blockx_executor is installed from this checkout, so without
    # the other checkout's executor directory first its Worker ran this one's executors.
    import importlib.util

    from bench.e2e.harness import BenchWorker
    other = tmp_path / "checkout"
    (other / "executor" / "blockx_executor").mkdir(parents=True)
    (other / "executor" / "blockx_executor" / "__init__.py").write_text("")
    w = BenchWorker(executors=1, root=other)
    try:
        path = w.pythonpath("/inherited")
    finally:
        w.cleanup()
    found = subprocess.run([sys.executable, "-c", "import blockx_executor; print(blockx_executor.__file__)"],
                           env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, check=True)
    assert found.stdout.strip() == str(other / "executor" / "blockx_executor" / "__init__.py")
    assert path.split(os.pathsep)[-1] == "/inherited"
    assert importlib.util.find_spec("blockx_executor").origin != found.stdout.strip()
