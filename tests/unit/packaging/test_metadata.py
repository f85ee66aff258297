"""pyproject.toml against what the code needs: dependency floors equal to the
versions the generated gRPC code asserts at import, one version source, extras
that list what blockx.extras checks, stubs for every compiled module."""
import importlib
import pathlib
import re
import subprocess
import sys
import tomllib
import types

import blockx
from blockx.app.profile import PROFILES
from blockx.app.profile_names import PROFILE_NAMES
from blockx.extras import EXTRAS

ROOT = pathlib.Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
GEN = ROOT / "blockx" / "worker" / "v1"


def _spec(reqs, name):
    """The version specifier of distribution ``name`` in a requirement list."""
    found = [r[len(name):].strip() for r in reqs if re.match(rf"{re.escape(name)}(?![\w.-])", r)]
    assert len(found) == 1, (name, reqs)
    return found[0]


def _protobuf_gencode() -> str:
    m = re.search(r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+),",
                  (GEN / "worker_pb2.py").read_text())
    return ".".join(m.groups())


def _grpc_gencode() -> str:
    return re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", (GEN / "worker_pb2_grpc.py").read_text()).group(1)


def test_the_floors_are_the_versions_the_generated_code_refuses_to_run_below():
    deps = PROJECT["dependencies"]
    pb = _protobuf_gencode()
    assert _spec(deps, "protobuf") in (f">={pb},<{int(pb.split('.')[0]) + 1}", f"<{int(pb.split('.')[0]) + 1},>={pb}")
    assert _spec(deps, "grpcio") == f">={_grpc_gencode()}"
    for extra in ("grpcio-health-checking", "grpcio-reflection"):
        assert _spec(PROJECT["optional-dependencies"]["worker"], extra) == f">={_grpc_gencode()}"


def test_the_code_is_generated_by_the_pinned_grpcio_tools():
    pin = f"=={_grpc_gencode()}"
    assert _spec(PYPROJECT["build-system"]["requires"], "grpcio-tools") == pin
    assert _spec(PROJECT["optional-dependencies"]["dev"], "grpcio-tools") == pin
    assert f'"grpcio-tools{pin}"' in (ROOT / "Makefile").read_text()


def test_one_version_source_and_blockx_version_prints_it():
    assert "version" not in PROJECT and PROJECT["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "blockx.__version__"}
    out = subprocess.run([sys.executable, "-m", "blockx", "--version"], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout.strip()) == (0, f"blockx {blockx.__version__}")


def test_the_base_install_is_the_client_and_the_extras_are_what_blockx_extras_checks():
    names = lambda reqs: sorted(re.match(r"[A-Za-z0-9_.-]+", r).group(0) for r in reqs)
    assert names(PROJECT["dependencies"]) == ["aetcd", "grpcio", "protobuf", "shtab"]
    extras = PROJECT["optional-dependencies"]
    assert names(extras["worker"]) == sorted(EXTRAS["worker"].values())
    assert names(extras["cli"]) == sorted(EXTRAS["cli"].values())
    every = [r for reqs in [PROJECT["dependencies"], *extras.values()] for r in reqs]
    assert not any(r.startswith("psutil") for r in every)


def test_psutil_is_not_imported_anywhere():
    for tree in ("blockx", "executor", "tests", "bench"):
        for p in (ROOT / tree).rglob("*.py*"):
            if p.suffix in (".py", ".pyx", ".pxd"):
                assert not re.search(r"^\s*(import|from)\s+psutil\b", p.read_text(), re.M), p


def test_the_serve_parser_offers_every_profile():
    assert PROFILE_NAMES == tuple(PROFILES)


def _imported(module, name) -> bool:
    """A module, class or function that ``module`` imports rather than defines."""
    value = getattr(module, name)
    if isinstance(value, types.ModuleType):
        return True
    owner = getattr(value, "__module__", None)
    return isinstance(owner, str) and owner != module.__name__ and not isinstance(value, (int, float, str, bytes))


def test_every_compiled_module_has_a_stub_covering_its_public_names():
    fast = ROOT / "blockx" / "_fast"
    pyx = sorted(p.stem for p in fast.glob("*.pyx"))
    assert pyx
    for name in pyx:
        stub = (fast / f"{name}.pyi").read_text()
        m = re.search(r"^from (blockx\._fast\.\w+) import \*", stub, re.M)
        assert m and m.group(1) == f"blockx._fast.{name}_py", name
        twin = importlib.import_module(m.group(1))
        exported = set(getattr(twin, "__all__", None) or [n for n in dir(twin) if not n.startswith("_")])
        exported |= set(re.findall(rf"^from {re.escape(m.group(1))} import (\w+) as \1\b", stub, re.M))
        compiled = importlib.import_module(f"blockx._fast.{name}")
        public = {n for n in dir(compiled) if not n.startswith("_") and not _imported(compiled, n)}
        assert public - exported == set(), f"{name}.pyi does not declare {sorted(public - exported)}"
    assert (ROOT / "blockx" / "py.typed").exists()


def test_the_license_is_the_apache_2_text():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text.splitlines()) > 180
    assert PROJECT["license"] == "Apache-2.0"
