"""Hot paths: each module NAME exists as a compiled Cython extension
(`NAME.pyx` + `NAME.pxd`) and as a pure-Python twin (`NAME_py.py`).

The twin is the test oracle and the benchmark baseline. `BLOCKX_NO_EXTENSIONS=1`
selects the twins everywhere; otherwise a missing compiled module is an error
(a silent fallback would hide a broken build behind a 10x slowdown).

This package imports nothing from the rest of blockx. The loaders below also
serve the compiled modules of another package (the dispatcher's, in
blockx.core.dispatch) when the caller names that package: the caller imports
them, this package only knows the switch."""

import importlib
import os

NO_EXTENSIONS = os.environ.get("BLOCKX_NO_EXTENSIONS", "") not in ("", "0")
HOT = "blockx._fast"


def load(name: str, package: str = HOT):
    """The implementation of hot module `name` (of `package`) that this process uses."""
    if NO_EXTENSIONS:
        return importlib.import_module(f"{package}.{name}_py")
    try:
        return importlib.import_module(f"{package}.{name}")
    except ImportError as exc:
        raise ImportError(
            f"compiled hot path {package}.{name} is not built ({exc}); "
            "run `make build`, or set BLOCKX_NO_EXTENSIONS=1 to use the pure-Python twins"
        ) from exc


def implementations(name: str, package: str = HOT):
    """[(label, module)] of every implementation in use: compiled and twin, or
    only the twin under BLOCKX_NO_EXTENSIONS=1. Tests parametrize over this."""
    out = []
    if not NO_EXTENSIONS:
        out.append(("cython", importlib.import_module(f"{package}.{name}")))
    out.append(("python", importlib.import_module(f"{package}.{name}_py")))
    return out


def compiled(name: str, package: str = HOT):
    """The compiled module `name` whatever BLOCKX_NO_EXTENSIONS says: for tests of
    a property only the compiled module has (kept out of the cyclic GC), or that
    compare it with its twin. `make build` builds it before either test run."""
    return importlib.import_module(f"{package}.{name}")


def twin(name: str, package: str = HOT):
    """The pure-Python twin of hot module `name`."""
    return importlib.import_module(f"{package}.{name}_py")
