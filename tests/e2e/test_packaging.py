"""The distribution as a user gets it: `python -m build` makes the sdist and a wheel
built from that sdist; the wheel installs into clean venvs with no compiler on
PATH (CC=/bin/false, binaries only). One venv has the `worker` extra and runs
`blockx serve` and the README's client tour against it; one has the base install
alone, talks to that worker as a client and is refused `blockx serve` with the
install command. pip resolves the dependencies from the configured index and its
cache."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

from blockx import __version__
from tests.support.worker import WorkerProcess

# About 3.5 minutes on an idle 2-core machine, most of it compiling the extensions
# for the wheel; the fixture's build counts against each test's timeout, so the
# limit leaves room for a loaded machine.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
ROOT = pathlib.Path(__file__).resolve().parents[2]
PYX = sorted(p.stem for p in (ROOT / "blockx" / "_fast").glob("*.pyx"))
WORKER_ONLY = ("uvloop", "greenlet", "orjson", "duckdb", "asyncpg", "prometheus_client", "rich")


def _run(cmd, *, env=None, cwd=None, timeout=300, check=True) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check:
        assert out.returncode == 0, f"{cmd}: exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def _no_compiler_env(tmp: pathlib.Path, venv: pathlib.Path | None = None) -> dict[str, str]:
    """The environment of a machine without a C compiler: PATH has the venv and
    nothing else, CC / CXX fail, and the dev tree is not importable."""
    empty = tmp / "no-compiler-bin"
    empty.mkdir(exist_ok=True)
    path = os.pathsep.join(str(p) for p in ([venv / "bin"] if venv else []) + [empty])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=path, CC="/bin/false", CXX="/bin/false", LDSHARED="/bin/false", PYTHONNOUSERSITE="1")
    for tool in ("gcc", "cc", "c++", "clang"):
        assert shutil.which(tool, path=path) is None, f"{tool} is on the test's PATH"
    return env


def _venv(tmp: pathlib.Path, name: str, requirement: str) -> pathlib.Path:
    venv = tmp / name
    _run([sys.executable, "-m", "venv", venv])
    env = _no_compiler_env(tmp, venv)
    _run([venv / "bin" / "python", "-m", "pip", "install", "-q", "--only-binary=:all:", requirement], env=env,
         timeout=600)
    return venv


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict[str, pathlib.Path]:
    """`make dist`'s build: the sdist, then the wheel built from the unpacked sdist."""
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT], cwd=ROOT, timeout=900)
    sdists, wheels = list(out.glob("*.tar.gz")), list(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(out.iterdir())
    return {"sdist": sdists[0], "wheel": wheels[0]}


def test_the_sdist_carries_what_a_build_needs_and_no_build_output(dist):
    with tarfile.open(dist["sdist"]) as tf:
        top = f"blockx_worker-{__version__}/"
        names = {n.removeprefix(top) for n in tf.getnames()}
    needed = {"pyproject.toml", "setup.py", "MANIFEST.in", "LICENSE", "CHANGELOG.md", "README.md",
              "proto/blockx/worker/v1/worker.proto", "blockx/worker/v1/worker_pb2.py",
              "blockx/worker/v1/worker_pb2.pyi", "blockx/worker/v1/worker_pb2_grpc.py", "blockx/py.typed",
              "executor/blockx_executor/__main__.py", "executor/blockx_executor/py.typed",
              "blockx/examples/functions/add.py", "examples/client_tour.py"}
    for n in PYX:
        needed |= {f"blockx/_fast/{n}.pyx", f"blockx/_fast/{n}.pyi", f"blockx/_fast/{n}_py.py"}
    needed |= {str(p.relative_to(ROOT)) for p in (ROOT / "blockx" / "_fast").glob("*.pxd")}
    assert needed - names == set()
    needed |= {f"blockx/dashboard/static/{f}" for f in ("index.html", "app.js", "app.css")}
    assert needed - names == set()
    # Cython's annotation pages are build outputs; the dashboard's page is a source
    assert [n for n in names if n.endswith((".c", ".so", ".pyc", ".html"))
            and not n.startswith("blockx/dashboard/static/")] == []


def test_the_wheel_is_binary_typed_and_declares_client_only_dependencies(dist):
    with zipfile.ZipFile(dist["wheel"]) as zf:
        names = set(zf.namelist())
        meta = zf.read(f"blockx_worker-{__version__}.dist-info/METADATA").decode()
    assert re.search(r"-cp3\d+-cp3\d+-linux_\w+\.whl$", dist["wheel"].name), dist["wheel"].name
    for n in PYX:
        assert any(re.fullmatch(rf"blockx/_fast/{n}\.cpython-.*\.so", x) for x in names), n
        assert f"blockx/_fast/{n}.pyi" in names
    assert {"blockx/py.typed", "blockx/worker/v1/worker_pb2_grpc.py", "blockx_executor/sdk.py",
            f"blockx_worker-{__version__}.dist-info/licenses/LICENSE"} <= names
    # every package of the layout ships (find_packages finds a folder by its __init__.py)
    assert {"blockx/core/worker/core.py", "blockx/adapters/grpc/server.py", "blockx/adapters/telemetry/otel_exporter.py",
            "blockx/plugins/function_code/directory.py", "blockx/credentials.py"} <= names
    base = sorted(re.findall(r"^Requires-Dist: ([A-Za-z0-9_.-]+)[^;\n]*$", meta, re.M))
    assert base == ["aetcd", "grpcio", "protobuf", "redis", "shtab"]


@pytest.fixture(scope="module")
def installed_worker(dist, tmp_path_factory):
    """The wheel with the `worker` extra, serving the example functions it ships."""
    tmp = tmp_path_factory.mktemp("venv-worker")
    venv = _venv(tmp, "venv", f"{dist['wheel']}[worker]")
    py = venv / "bin" / "python"
    where = _run([py, "-c", "import blockx, blockx._fast.codec as c, blockx_executor; "
                            "print(blockx.__file__, c.__file__, blockx_executor.__file__)"],
                 env=_no_compiler_env(tmp, venv), cwd=tmp).stdout.split()
    assert all(p.startswith(str(venv)) for p in where), where
    assert where[1].endswith(".so")
    functions = pathlib.Path(where[0]).parent / "examples" / "functions"
    env = _no_compiler_env(tmp, venv)
    w = WorkerProcess({**env, "TASK_SLOTS": "32", "RESULT_RETENTION_MS": "60000"}, functions_dir=functions)
    for k in ("PYTHONPATH", "VIRTUAL_ENV"):     # nothing of the dev tree
        w.env.pop(k, None)
    w.serve_command = [str(venv / "bin" / "blockx"), "serve"]
    w.start()
    try:
        yield venv, w, tmp
    finally:
        w.stop()


def test_the_installed_worker_runs_the_client_tour(installed_worker):
    venv, worker, tmp = installed_worker
    env = {**_no_compiler_env(tmp, venv), "BLOCKX_ADDR": f"127.0.0.1:{worker.port}"}
    out = _run([venv / "bin" / "python", ROOT / "examples" / "client_tour.py"], env=env, cwd=tmp, timeout=120)
    lines = out.stdout.splitlines()
    assert lines[0] == f"SUCCEEDED [3, 42] 127.0.0.1:{worker.port}"
    assert lines[1] == str([i * i for i in range(10)])
    assert lines[2:4] == ["RUNNING False", "SUCCEEDED True"]
    assert lines[4].startswith("NotFound: task 'no-such-task' is not known")
    assert lines[5] == "[285]"
    assert lines[6] == "True 10"
    assert _run([venv / "bin" / "blockx", "--version"], env=env).stdout.strip() == f"blockx {__version__}"


CLIENT_SCRIPT = """
import asyncio, sys
from blockx.client import WorkerClient, connect

async def main():
    async with WorkerClient(sys.argv[1]) as c:
        print((await c.submit(calls=[("add", [1, 2])])).outputs)

asyncio.run(main())
with connect(sys.argv[1]) as c:
    print(c.submit(calls=[("square", [7])]).outputs)
print(sorted(m for m in sys.modules if m.split(".")[0] in {mods!r}))
"""


def test_the_base_install_is_a_client_and_refuses_to_serve(dist, installed_worker, tmp_path):
    _, worker, _ = installed_worker
    venv = _venv(tmp_path, "venv-base", str(dist["wheel"]))
    env = _no_compiler_env(tmp_path, venv)
    py, blockx = venv / "bin" / "python", venv / "bin" / "blockx"
    have = _run([py, "-c", "import importlib.util as u; print([m for m in %r if u.find_spec(m)])" % (WORKER_ONLY,)],
                env=env, cwd=tmp_path).stdout.strip()
    assert have == "[]", f"the base install pulled in {have}"

    addr = f"127.0.0.1:{worker.port}"
    out = _run([py, "-c", CLIENT_SCRIPT.format(mods=set(WORKER_ONLY)), addr], env=env, cwd=tmp_path)
    assert out.stdout.splitlines() == ["[3]", "[49]", "[]"], out.stdout

    sub = _run([blockx, "submit", "--addr", addr, "--compact", "--calls", "add:2,3"], env=env, cwd=tmp_path)
    assert json.loads(sub.stdout)["result"]["outputs"] == [5]
    st = _run([blockx, "status", "--addr", addr], env=env, cwd=tmp_path)
    assert st.stdout.startswith(f"worker {addr}  v{__version__}") and "EXECUTOR" in st.stdout, st.stdout
    assert st.stderr == ""

    serve = _run([blockx, "serve"], env=env, cwd=tmp_path, check=False)
    assert serve.returncode == 2, (serve.returncode, serve.stderr)
    assert "`blockx serve` needs the 'worker' extra of blockx-worker" in serve.stderr
    assert "uvloop" in serve.stderr and "pip install 'blockx-worker[worker]'" in serve.stderr
    assert "Traceback" not in serve.stderr
