"""The cores are Sans-IO: they never read the clock, do IO, or pick random numbers.

Every module under blockx/core is parsed and its imports are checked, including
imports nested in functions, `__import__` and `importlib` use: its Python source,
and the Cython source (.pyx, .pxd) of the dispatcher's compiled parts, which
the core runs by default. The hot paths of blockx._fast the core loads are held
to the same rule."""
import ast
import pathlib
import re

import pytest

CORE = pathlib.Path(__file__).resolve().parents[3] / "blockx" / "core"
FORBIDDEN = {"asyncio", "time", "datetime", "socket", "grpc", "os", "random", "logging",
             "threading", "subprocess", "selectors", "uvloop", "importlib", "signal"}


def _imports(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                yield node.module.split(".")[0], node.lineno
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__":
            yield "__import__", node.lineno


def core_modules():
    files = sorted(CORE.rglob("*.py"))
    assert files, f"no core modules found under {CORE}"
    return files


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: p.name)
def test_core_module_imports_nothing_impure(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    bad = [(name, line) for name, line in _imports(tree) if name in FORBIDDEN or name == "__import__"]
    assert not bad, f"{path.name} imports {bad}: core modules must stay Sans-IO"


def test_purity_checker_catches_a_forbidden_import():
    tree = ast.parse("def f():\n    import time\n    from asyncio import sleep\n")
    assert {n for n, _ in _imports(tree)} == {"time", "asyncio"}


FAST = CORE.parent / "_fast"


def _loaded_hot_modules():
    """Names of the blockx._fast modules the core loads (``load("name")``)."""
    names = set()
    for path in core_modules():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "load"
                    and node.args and isinstance(node.args[0], ast.Constant)
                    and len(node.args) == 1 and not node.keywords):   # load("x", package): not _fast
                names.add(node.args[0].value)
    return sorted(names)


def test_the_core_loads_its_hot_modules_by_name():
    assert {"readyqueue", "scoring", "cachekey"} <= set(_loaded_hot_modules())


@pytest.mark.parametrize("name", _loaded_hot_modules())
def test_twins_of_the_hot_modules_the_core_uses_are_pure(name):
    """The core runs their code too: the same rule holds for the twin (the
    compiled module is built from the same logic)."""
    path = FAST / f"{name}_py.py"
    assert path.exists(), f"the core loads blockx._fast.{name} but {path.name} is missing"
    tree = ast.parse(path.read_text(), filename=str(path))
    bad = [(n, line) for n, line in _imports(tree) if n in FORBIDDEN or n == "__import__"]
    assert not bad, f"{path.name} imports {bad}: the core's hot modules must stay Sans-IO"


_PYX_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import|c?import\s+([\w.]+))", re.M)


def _pyx_imports(text):
    """(top-level package, line) of every import / cimport statement of a .pyx or .pxd
    (Cython source is not Python: read its import lines, at any indentation)."""
    for m in _PYX_IMPORT.finditer(text):
        name = m.group(1) or m.group(2)
        yield name.split(".")[0], text.count("\n", 0, m.start()) + 1


def test_the_pyx_import_reader_catches_a_forbidden_import():
    text = "cimport cython\nfrom time import monotonic\ncdef f():\n    import os\n"
    assert {n for n, _ in _pyx_imports(text)} == {"cython", "time", "os"}


@pytest.mark.parametrize("name", _loaded_hot_modules())
def test_compiled_hot_modules_the_core_uses_are_pure(name):
    """The compiled form the core runs by default: its .pyx (and .pxd) import
    nothing the core may not import either."""
    for suffix in (".pyx", ".pxd"):
        path = FAST / f"{name}{suffix}"
        if suffix == ".pyx":
            assert path.exists(), f"the core loads blockx._fast.{name} but {path.name} is missing"
        if not path.exists():
            continue
        bad = [(n, line) for n, line in _pyx_imports(path.read_text())
               if n in FORBIDDEN or n == "__import__"]
        assert not bad, f"{path.name} imports {bad}: the core's hot modules must stay Sans-IO"


def core_cython_sources():
    files = sorted([*CORE.rglob("*.pyx"), *CORE.rglob("*.pxd")])
    assert files, f"no compiled core modules found under {CORE}"
    return files


def test_the_dispatchers_compiled_parts_are_core_modules():
    names = {p.name for p in core_cython_sources()}
    assert {"records.pxd", "fairness.pxd", "lifecycle.pxd", "subcalls.pxd", "commands.pxd"} <= names


@pytest.mark.parametrize("path", core_cython_sources(), ids=lambda p: p.name)
def test_compiled_core_modules_import_nothing_impure(path):
    """The dispatcher's compiled parts are core code: their Cython source (.pyx and
    .pxd alike) imports nothing a core module may not import."""
    bad = [(n, line) for n, line in _pyx_imports(path.read_text()) if n in FORBIDDEN or n == "__import__"]
    assert not bad, f"{path.name} imports {bad}: core modules must stay Sans-IO"
