"""Functions that use packages the Worker does not have: a directory of
EXECUTOR_SITE_PACKAGES, or a venv of their own as EXECUTOR_PYTHON (the Worker
puts its executor runtime on that interpreter's path), in every spawn mode
(process, bwrap sandbox, oci sandbox). A package that is nowhere fails the call
with a message naming it and the settings, and is not retried."""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

from blockx.worker.v1 import worker_pb2 as pb
from tests.e2e.spawn_modes import SPAWN_MODES, spawn_env
from tests.support.worker import WorkerProcess, outputs

PACKAGE = "fndep_shout"          # a tiny real package, in none of the Worker's paths
FUNCTIONS = {
    "uses_dep.py": f"import {PACKAGE}\n\n\ndef main(text):\n    return [{PACKAGE}.shout(text), {PACKAGE}.__file__]\n",
    "uses_missing.py": "import fndep_nowhere_to_be_found\n\n\ndef main():\n    return 1\n",
    "add.py": "def main(a, b):\n    return a + b\n",
}


def _open_dir(prefix: str) -> pathlib.Path:
    """A directory the executors' user (nobody under a root Worker) may read."""
    d = pathlib.Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    d.chmod(0o755)
    return d


def _write_package(site: pathlib.Path) -> None:
    pkg = site / PACKAGE
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("def shout(text):\n    return text.upper() + '!'\n")
    for p in (pkg, pkg / "__init__.py"):
        p.chmod(0o755 if p.is_dir() else 0o644)


@pytest.fixture(scope="module")
def functions_dir():
    d = _open_dir("bx-fndep-fn-")
    for name, src in FUNCTIONS.items():
        (d / name).write_text(src)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def site_dir():
    d = _open_dir("bx-fndep-site-")
    _write_package(d)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def venv_python():
    """A venv of the Worker's Python version with the package in its own
    site-packages (and neither blockx, greenlet nor orjson)."""
    d = _open_dir("bx-fndep-venv-")
    base = os.path.join(sys.base_prefix, "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}")
    subprocess.run([base, "-m", "venv", "--without-pip", str(d / "venv")], check=True)
    python = d / "venv" / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    _write_package(pathlib.Path(site))
    for root, dirs, _ in os.walk(d):
        for x in dirs:
            os.chmod(os.path.join(root, x), 0o755)
    probe = subprocess.run([str(python), "-c", "import greenlet"], capture_output=True)
    assert probe.returncode != 0, "the venv must not have the executor runtime of its own"
    yield python, pathlib.Path(site)
    shutil.rmtree(d, ignore_errors=True)


def _worker(functions_dir, mode, env):
    w = WorkerProcess({"RESULT_RETENTION_MS": "60000", **spawn_env(mode), **env},
                      functions_dir=functions_dir, executors=1)
    try:
        return w.start()
    except BaseException:
        w.stop()                                      # a Worker that never became ready
        raise


def _run(w, task_id, fn, args, retry=(1, 5, 0)):
    w.submit_calls(task_id, [(fn, args)], retry=retry)
    return w.wait_terminal(task_id, timeout=60)


def _retried(w) -> float:
    for line in w.metrics_text().splitlines():
        if line.startswith("blockx_calls_retried_total "):
            return float(line.split()[1])
    return 0.0


@pytest.mark.parametrize("mode", SPAWN_MODES)
def test_a_function_imports_a_package_of_executor_site_packages(functions_dir, site_dir, mode):
    w = _worker(functions_dir, mode, {"EXECUTOR_SITE_PACKAGES": str(site_dir)})
    try:
        res = _run(w, "t-dep", "uses_dep", ["hi"])
        assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
        shout, where = outputs(res)[0]
        assert shout == "HI!" and where == str(site_dir / PACKAGE / "__init__.py"), where
        # Nowhere: the call fails for good, naming the package and where to put it.
        res = _run(w, "t-missing", "uses_missing", [], retry=(3, 5, 0))
        assert res.state == pb.TASK_STATE_FAILED and res.failure_code == "CALL_FAILED", res
        msg = res.failure_message
        assert "ModuleNotFoundError: No module named 'fndep_nowhere_to_be_found'" in msg, msg
        assert "no package 'fndep_nowhere_to_be_found'" in msg and "EXECUTOR_SITE_PACKAGES" in msg, msg
        assert _retried(w) == 0, "a missing package is not worth a retry"
        res = _run(w, "t-add", "add", [1, 2])
        assert res.state == pb.TASK_STATE_SUCCEEDED and outputs(res) == [3], res
    finally:
        w.stop()


@pytest.mark.parametrize("mode", SPAWN_MODES)
def test_a_function_imports_a_package_of_its_own_executor_python(functions_dir, venv_python, mode):
    python, site = venv_python
    w = _worker(functions_dir, mode, {"EXECUTOR_PYTHON": str(python)})
    try:
        ev = w.find_event("executor_environment")
        assert ev is not None and str(python) in ev["environment"], ev
        res = _run(w, "t-dep", "uses_dep", ["venv"])
        assert res.state == pb.TASK_STATE_SUCCEEDED, res.failure_message
        shout, where = outputs(res)[0]
        assert shout == "VENV!" and where == str(site / PACKAGE / "__init__.py"), where
    finally:
        w.stop()
    assert not list(pathlib.Path(tempfile.gettempdir()).glob(f"blockx-executor-runtime-*/{PACKAGE}"))


def test_an_executor_python_of_another_version_is_refused_at_start(functions_dir, tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho '{\"version\": [2, 7], \"prefix\": \"/x\", \"base_prefix\": \"/x\", "
                    "\"executable\": \"/x/bin/python\"}'\n")
    fake.chmod(0o755)
    w = WorkerProcess({"EXECUTOR_PYTHON": str(fake)}, functions_dir=functions_dir, executors=1)
    mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
    try:
        with pytest.raises(AssertionError) as err:
            w.start()
    finally:
        w.stop()                                      # had it started after all
    assert "worker exited (2) before 'worker_serving'" in str(err.value), err.value
    assert f"is Python 2.7, and the executors need the Worker's Python {mine}" in str(err.value), err.value
