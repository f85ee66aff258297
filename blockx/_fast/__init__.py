"""Hot paths: each module NAME exists as a compiled Cython extension
(`NAME.pyx` + `NAME.pxd`) and as a pure-Python twin (`NAME_py.py`).

The twin is the test oracle and the benchmark baseline. `BLOCKX_NO_EXTENSIONS=1`
selects the twins everywhere; otherwise a missing compiled module is an error
(a silent fallback would hide a broken build behind a 10x slowdown).

This package imports nothing from the rest of blockx. It also owns the switch
for the compiled modules of other packages (the dispatcher's, in
blockx.core.dispatch), which come in two kinds:

- a `.pyx` with its twin `NAME_py.py` beside it, loaded like the hot paths
  here: ``load("NAME", "blockx.core.dispatch")``;
- one source in Cython's pure-Python mode: an annotated `NAME.py` with a
  same-name `NAME.pxd`, which the build compiles to `NAME.*.so`, imported by
  its plain name. CPython prefers the extension over the `.py` of the same
  name, so under BLOCKX_NO_EXTENSIONS=1 a finder installed when this package is
  imported (SourceFinder below) loads the `.py` instead: the twin run runs the
  same source, interpreted (Cython's `cython` module then supplies the
  annotations' names, so it needs Cython installed: the dev extra)."""

import importlib
import importlib.machinery
import importlib.util
import os
import sys

NO_EXTENSIONS = os.environ.get("BLOCKX_NO_EXTENSIONS", "") not in ("", "0")
HOT = "blockx._fast"
_EXT = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def _source_of(origin):
    """The pure-mode source beside compiled module file `origin`, or None."""
    if origin and origin.endswith(_EXT):
        src = origin[: origin.index(".", origin.rindex(os.sep))] + ".py"
        if os.path.exists(src):
            return src
    return None


class SourceFinder:
    """Under BLOCKX_NO_EXTENSIONS=1: a module of blockx compiled from its own
    `.py` (pure mode) is loaded from that `.py`, not from the extension."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if not fullname.startswith("blockx."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        src = _source_of(spec.origin) if spec is not None else None
        if src is None:
            return None
        return importlib.util.spec_from_file_location(fullname, src)


if NO_EXTENSIONS and not any(f is SourceFinder for f in sys.meta_path):
    sys.meta_path.insert(0, SourceFinder)


def load(name: str, package: str = HOT):
    """The implementation of hot module `name` (of `package`) that this process uses
    (a pure-mode module is imported by its name: the finder picks its form)."""
    if _is_pure_mode(name, package):
        return importlib.import_module(f"{package}.{name}")
    if NO_EXTENSIONS:
        return importlib.import_module(f"{package}.{name}_py")
    try:
        return importlib.import_module(f"{package}.{name}")
    except ImportError as exc:
        raise ImportError(
            f"compiled hot path {package}.{name} is not built ({exc}); "
            "run `make build`, or set BLOCKX_NO_EXTENSIONS=1 to use the pure-Python twins"
        ) from exc


def _is_pure_mode(name: str, package: str) -> bool:
    spec = importlib.util.find_spec(package)
    return spec is not None and any(
        os.path.exists(os.path.join(d, name + ".py")) and os.path.exists(os.path.join(d, name + ".pxd"))
        for d in (spec.submodule_search_locations or ()))


def _from_file(fullname: str, path: str, loader):
    """Module `fullname` made from `path` by `loader`, not put in sys.modules (the
    other form of a pure-mode module, beside the one the process imported)."""
    spec = importlib.util.spec_from_file_location(fullname, path, loader=loader)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_FORMS: dict = {}


def _pure_form(name: str, package: str, interpreted: bool):
    """The compiled or the interpreted form of pure-mode module package.name, each
    made once: the form this process imports by name is that module; the other
    is made from its file (not put in sys.modules). A compiled form runs with
    its compiled collaborators only: under BLOCKX_NO_EXTENSIONS=1 one that
    cimports another pure-mode module cannot be loaded."""
    fullname = f"{package}.{name}"
    used = importlib.import_module(fullname)
    if interpreted is NO_EXTENSIONS:
        return used
    key = (fullname, interpreted)
    if key not in _FORMS:
        origin = used.__file__
        assert origin is not None, f"{fullname} has no file"
        if interpreted:
            src = _source_of(origin)
            assert src is not None, f"{fullname} has no source beside {origin}"
            _FORMS[key] = _from_file(fullname, src, importlib.machinery.SourceFileLoader(fullname, src))
        else:
            d = os.path.dirname(origin)
            so = next((os.path.join(d, f) for f in sorted(os.listdir(d))
                       if f.startswith(name + ".") and f.endswith(_EXT)), None)
            if so is None:
                raise ImportError(f"compiled module {fullname} is not built; run `make build`")
            _FORMS[key] = _from_file(fullname, so, importlib.machinery.ExtensionFileLoader(fullname, so))
    return _FORMS[key]


def implementations(name: str, package: str = HOT):
    """[(label, module)] of every implementation in use: compiled and twin, or
    only the twin under BLOCKX_NO_EXTENSIONS=1 (for a pure-mode module: its
    compiled and interpreted forms, or only the interpreted). Tests
    parametrize over this."""
    if _is_pure_mode(name, package):
        return ([] if NO_EXTENSIONS else [("cython", _pure_form(name, package, False))]) + \
            [("python", _pure_form(name, package, True))]
    out = []
    if not NO_EXTENSIONS:
        out.append(("cython", importlib.import_module(f"{package}.{name}")))
    out.append(("python", importlib.import_module(f"{package}.{name}_py")))
    return out


def compiled(name: str, package: str = HOT):
    """The compiled module `name` whatever BLOCKX_NO_EXTENSIONS says: for tests of
    a property only the compiled module has (kept out of the cyclic GC), or that
    compare it with its twin. `make build` builds it before either test run."""
    if _is_pure_mode(name, package):
        return _pure_form(name, package, False)
    return importlib.import_module(f"{package}.{name}")


def twin(name: str, package: str = HOT):
    """The pure-Python twin of hot module `name` (the interpreted form of a
    pure-mode module)."""
    if _is_pure_mode(name, package):
        return _pure_form(name, package, True)
    return importlib.import_module(f"{package}.{name}_py")
