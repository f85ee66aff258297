"""The switch between compiled and interpreted code (blockx._fast's loader): a
module of blockx written in Cython's pure-Python mode (an annotated NAME.py
with its NAME.pxd, compiled by the build) is the extension by default and its
own .py under BLOCKX_NO_EXTENSIONS=1, though CPython would pick the extension."""
import importlib.machinery
import os
import subprocess
import sys
import warnings

import pytest

from blockx import _fast
from blockx._fast import NO_EXTENSIONS, compiled, implementations, twin

PURE_MODE = ["commands", "fairness", "lifecycle", "records", "reservations", "subcalls"]
PKG = "blockx.core.dispatch"
CIMPORTS_PURE_MODE = {"fairness", "lifecycle", "subcalls"}   # cimport records / commands


def _is_extension(mod) -> bool:
    return mod.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


@pytest.mark.parametrize("name", PURE_MODE)
def test_a_pure_mode_module_is_compiled_unless_extensions_are_off(name):
    mod = importlib.import_module(f"{PKG}.{name}")
    assert _is_extension(mod) is not NO_EXTENSIONS, mod.__file__
    assert os.path.exists(os.path.join(os.path.dirname(mod.__file__), name + ".pxd"))
    assert not os.path.exists(os.path.join(os.path.dirname(mod.__file__), name + "_py.py")), \
        "one source: a pure-mode module has no twin file"


@pytest.mark.parametrize("name", PURE_MODE)
def test_both_forms_of_a_pure_mode_module_are_at_hand(name):
    forms = dict(implementations(name, PKG))
    assert set(forms) == ({"python"} if NO_EXTENSIONS else {"cython", "python"})
    assert not _is_extension(forms["python"]) and forms["python"].__file__.endswith(f"{name}.py")
    assert not _is_extension(twin(name, PKG))
    if NO_EXTENSIONS and name in CIMPORTS_PURE_MODE:
        # A compiled form runs with its compiled collaborators only (no mixed mode):
        # in a process that runs those interpreted, it cannot be loaded (the
        # collaborator has no C interface, or its types are not the compiled ones).
        # Cython warns of the size mismatch before it refuses; that warning is part of
        # the refusal, and any other warning still fails the run.
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with pytest.raises((AttributeError, ValueError), match="__pyx_capi__|size changed"):
                compiled(name, PKG)
        assert all("size changed" in str(w.message) for w in seen), [str(w.message) for w in seen]
        return
    assert _is_extension(compiled(name, PKG))
    assert compiled(name, PKG) is compiled(name, PKG)        # each form is made once
    assert importlib.import_module(f"{PKG}.{name}") in forms.values()


def test_the_source_finder_serves_only_modules_with_their_source_beside():
    # A hot path of blockx._fast is a .pyx with a twin: no source of its own name, so
    # the finder leaves it to the normal import (and under BLOCKX_NO_EXTENSIONS=1 the
    # twin is what load() returns).
    import blockx.core.dispatch as pkg
    assert _fast.SourceFinder.find_spec("blockx._fast.codec", _fast.__path__) is None
    assert _fast.SourceFinder.find_spec("json") is None
    spec = _fast.SourceFinder.find_spec(f"{PKG}.commands", pkg.__path__)
    assert spec is not None and spec.origin.endswith("commands.py")


@pytest.mark.parametrize("env, expect", [("1", ".py"), ("", ".so")])
def test_the_switch_holds_in_a_fresh_process(env, expect):
    code = ("import blockx.core.dispatch.commands as m, blockx.core.dispatch.subcalls as s; "
            "print(m.__file__); print(s.__file__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "BLOCKX_NO_EXTENSIONS": env}).stdout.split()
    assert len(out) == 2 and all(p.endswith(expect) for p in out), out
