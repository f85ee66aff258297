"""`make clean` removes every build output: run for real (make, the repo's
Makefile) on a tree holding one of each kind of file the build writes, for
every directory setup.py compiles, beside the sources it must keep."""
from __future__ import annotations

import ast
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def compiled_dirs() -> list[str]:
    """setup.py's COMPILED_DIRS, read from its source (importing it would run setup())."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "COMPILED_DIRS" for t in node.targets):
            return ["/".join(ast.literal_eval(arg) for arg in call.args) for call in node.value.elts]
    raise AssertionError("setup.py has no COMPILED_DIRS")


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_clean_removes_every_build_output(tmp_path):
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    outputs, sources = [], []
    for d in compiled_dirs():
        outputs += [f"{d}/mod.c", f"{d}/mod.cpython-311-x86_64-linux-gnu.so", f"{d}/mod.html"]
        sources += [f"{d}/mod.pyx", f"{d}/mod.pxd", f"{d}/mod.pyi", f"{d}/twin.py"]
    outputs += ["build/lib/x.so", "dist/blockx_worker-0.1.0.tar.gz", "blockx_worker.egg-info/PKG-INFO",
                "blockx/worker/v1/worker_pb2.py", "blockx/worker/v1/worker_pb2.pyi",
                "blockx/worker/v1/worker_pb2_grpc.py"]
    sources += ["blockx/worker/v1/__init__.py", "proto/blockx/worker/v1/worker.proto"]
    for rel in outputs + sources:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    r = subprocess.run(["make", "-s", "clean"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [rel for rel in outputs if (tmp_path / rel).exists()] == []
    assert [rel for rel in sources if not (tmp_path / rel).exists()] == []


def test_the_makefile_cleans_the_dirs_setup_py_compiles():
    make = (ROOT / "Makefile").read_text()
    line = next(x for x in make.splitlines() if x.startswith("COMPILED_DIRS"))
    assert line.split(":=", 1)[1].split("#")[0].split() == compiled_dirs()
