"""The cores are Sans-IO: they never read the clock, do IO, or pick random numbers.

Every module under blockx/core is parsed and its imports are checked, including
imports nested in functions, `__import__` and `importlib` use."""
import ast
import pathlib

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
                    and node.args and isinstance(node.args[0], ast.Constant)):
                names.add(node.args[0].value)
    return sorted(names)


def test_the_core_loads_its_hot_modules_by_name():
    assert {"dispatchloop", "readyqueue", "scoring", "cachekey"} <= set(_loaded_hot_modules())


@pytest.mark.parametrize("name", _loaded_hot_modules())
def test_twins_of_the_hot_modules_the_core_uses_are_pure(name):
    """The core runs their code too: the same rule holds for the twin (the
    compiled module is built from the same logic)."""
    path = FAST / f"{name}_py.py"
    assert path.exists(), f"the core loads blockx._fast.{name} but {path.name} is missing"
    tree = ast.parse(path.read_text(), filename=str(path))
    bad = [(n, line) for n, line in _imports(tree) if n in FORBIDDEN or n == "__import__"]
    assert not bad, f"{path.name} imports {bad}: the core's hot modules must stay Sans-IO"
