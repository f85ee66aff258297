"""Imports point one way: down the layers of the table below, with no cycle
between two modules, and none between two packages (blockx.adapters,
blockx.app, blockx.client, blockx.cli, ...).

The layers, lowest first. A layer imports its own modules and those of the
layers of lower rank, never one of higher rank; two layers of one rank stand
beside each other and import neither. The side says what the Worker and the
client library share: a layer of the Worker's side never imports one of the
client's side, nor the reverse, whatever their ranks (the client library is
not part of the Worker, and the Worker does not read its rules from it).

    rank  layer      side    packages and modules
    0     base       -       blockx, blockx.worker, blockx._fast, blockx.json_types, blockx.log_event,
                             blockx.redaction, blockx.extras, blockx.follower, blockx.tenant_view
    1     shared     -       blockx.tls, blockx.credentials, blockx.protocol, blockx.etcd
    2     core       worker  blockx.core
    2     client     client  blockx.client
    3     plugins    worker  blockx.plugins
    4     adapters   worker  blockx.adapters
    5     dashboard  -       blockx.dashboard
    6     app        worker  blockx.app
    7     cli        -       blockx.cli, blockx.__main__
    7     executor   -       blockx_executor, blockx.examples

What each holds: base, what imports nothing of blockx (the package face with
its version, protoc's generated code, the hot paths, small value modules);
shared, what both the Worker and its clients speak (TLS settings, bearer
credentials, the executor protocol, etcd connections); core, the Sans-IO state
machines; plugins, builders, writers, IO backends and function code sources;
adapters, the Worker's IO (gRPC, executors, telemetry, etcd publishing);
dashboard, the web pages over the client library, which a Worker also serves
for itself (the app starts them, so the Worker's process loads the client
library only through them); app, the assembly of one Worker; cli, the `blockx`
command; executor, the executor program (it logs in the Worker's format,
blockx.app.logs) and the example functions it runs (blockx.examples).
Every top-level package or module of blockx, and the executor package, stands
in the table: one added without a row fails here, and so does a row naming
what no longer exists.

Every import counts, wherever it is written: at the top of a module, inside a
function (an import put there only to hide a cycle still is one at run time),
in a Cython ``.pyx`` /
``.pxd`` (``import`` and ``cimport``), and the dynamic loads of a hot module by
its name (``load("codec")`` of blockx._fast, ``importlib.import_module("x.y")``
with a constant name), which reach ``blockx._fast.NAME`` and its twin
``blockx._fast.NAME_py``. Importing a submodule also runs its package's
``__init__``; that implicit step is not an edge (a package's face may re-export
its parts), but an explicit ``from blockx.cli import main`` is. An import under
``if TYPE_CHECKING:`` never runs, so two modules may name each other's types
that way; between packages it counts like any other (a layer that needs another
layer's types depends on that layer), and so it does for the layers.

The rule is tested, not a list of today's modules: a module added anywhere under
the scanned trees is checked without editing this file."""
from __future__ import annotations

import ast
import pathlib
import re
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TREES = {"blockx": ROOT / "blockx", "blockx_executor": ROOT / "executor" / "blockx_executor"}
SOURCES = ("*.py", "*.pyx", "*.pxd")
DYNAMIC_LOADERS = {"load", "implementations", "compiled", "twin"}     # blockx._fast's loaders, by hot-module name

_CY_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import\s+(.+)|c?import\s+([\w.,\s]+))$")


def _module_name(path: pathlib.Path, top: str, base: pathlib.Path) -> str:
    rel = path.relative_to(base).with_suffix("")
    parts = [top, *rel.parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_files(trees=TREES) -> dict[str, pathlib.Path]:
    """{module name: source file} of every module of the scanned trees (a
    compiled module's .pyx, else its .pxd, names the module once)."""
    out: dict[str, pathlib.Path] = {}
    for top, base in trees.items():
        for pattern in SOURCES:
            for path in sorted(base.rglob(pattern)):
                out.setdefault(_module_name(path, top, base), path)
    return out


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([target] if target else []))


def _typing_only_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside an ``if TYPE_CHECKING:`` body."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
                or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            for stmt in node.body:
                out.update(id(n) for n in ast.walk(stmt))
    return out


def _python_imports(source: str, module: str, is_package: bool, runtime_only: bool):
    """(imported module, name imported from it or None, line) for each import
    of a Python source, nested ones and constant-name dynamic loads included."""
    tree = ast.parse(source)
    skip = _typing_only_nodes(tree) if runtime_only else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = _resolve_relative(module, is_package, node.level, node.module)
            for alias in node.names:
                yield base, alias.name, node.lineno
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            arg = node.args[0].value
            if name in DYNAMIC_LOADERS and re.fullmatch(r"\w+", arg):
                package = _loader_package(node)
                yield package, arg, node.lineno
                yield package, arg + "_py", node.lineno
            elif name in ("import_module", "__import__") and re.fullmatch(r"[\w.]+", arg):
                yield arg, None, node.lineno
        elif isinstance(node, ast.JoinedStr) and module == "blockx._fast":
            pass    # load()'s own f-string: the loads it serves are counted at each caller


def _loader_package(call: ast.Call) -> str:
    """The package a loader call names (``load("records", "blockx.core.dispatch")``),
    by its second argument or ``package=``; blockx._fast when it names none."""
    given = call.args[1] if len(call.args) > 1 else next(
        (k.value for k in call.keywords if k.arg == "package"), None)
    if isinstance(given, ast.Constant) and isinstance(given.value, str):
        return given.value
    return "blockx._fast"


def _cython_imports(source: str):
    """The same for a .pyx / .pxd: Cython is not Python's grammar, so its import
    lines are read as text (one statement a line, continuation lines joined)."""
    text = re.sub(r"\\\n", " ", source)
    text = re.sub(r"\(([^()]*)\)", lambda m: m.group(0).replace("\n", " "), text)
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].rstrip()
        m = _CY_IMPORT.match(line)
        if not m:
            for m2 in re.finditer(r"\b(load|compiled|twin|implementations)\(\s*[\"'](\w+)[\"']"
                                  r"(?:\s*,\s*(?:package\s*=\s*)?[\"']([\w.]+)[\"'])?", line):
                package = m2.group(3) or "blockx._fast"
                yield package, m2.group(2), lineno
                yield package, m2.group(2) + "_py", lineno
            continue
        if m.group(1):
            for name in m.group(2).strip("() ").split(","):
                name = name.strip().split(" as ")[0].strip()
                if name:
                    yield m.group(1), name, lineno
        else:
            for name in m.group(3).split(","):
                name = name.strip().split(" as ")[0].strip()
                if name:
                    yield name, None, lineno


def _imports_of(module: str, path: pathlib.Path, runtime_only: bool):
    """(target, name, line, file) of each import of a module: of its source, and
    for a module in Cython's pure-Python mode (a .py with a same-name .pxd) of
    that .pxd's cimports as well (what the compiled form imports)."""
    source = path.read_text()
    if path.suffix in (".pyx", ".pxd"):
        found = _cython_imports(source)
    else:
        found = _python_imports(source, module, path.stem == "__init__", runtime_only)
    for target, name, line in found:
        yield target, name, line, path
    pxd = path.with_suffix(".pxd")
    if path.suffix == ".py" and pxd.exists():
        for target, name, line in _cython_imports(pxd.read_text()):
            yield target, name, line, pxd


def import_graph(trees=TREES, runtime_only: bool = False) -> dict[str, dict[str, list[str]]]:
    """{module: {imported module: ["file:line", ...]}} between the scanned modules
    (without the ``if TYPE_CHECKING:`` imports when runtime_only)."""
    files = module_files(trees)
    graph: dict[str, dict[str, list[str]]] = {m: {} for m in files}
    for module, path in files.items():
        for target, name, line, where_path in _imports_of(module, path, runtime_only):
            candidates = ([f"{target}.{name}"] if name and name != "*" else []) + [target]
            hit = next((c for c in candidates if c in files), None)
            if hit is None or hit == module:
                continue
            rel = where_path.relative_to(ROOT) if where_path.is_relative_to(ROOT) else where_path
            where = f"{rel}:{line}"
            seen = graph[module].setdefault(hit, [])
            if where not in seen:
                seen.append(where)
    return graph


def package_of(module: str, files: dict[str, pathlib.Path]) -> str:
    """The layer a module belongs to: its top-level package under blockx
    (blockx.adapters.executor.pool -> blockx.adapters); a module at the root of
    blockx (blockx.extras) is a layer of its own."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else module


def cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        comp.append(top)
                        if top == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
                continue
            if child not in graph:
                continue
            if child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


def package_graph(graph: dict[str, dict[str, list[str]]]) -> dict[str, dict[str, list[str]]]:
    files = {m: pathlib.Path() for m in graph}
    out: dict[str, dict[str, list[str]]] = {}
    for module, targets in graph.items():
        src = package_of(module, files)
        out.setdefault(src, {})
        for target, where in targets.items():
            dst = package_of(target, files)
            if dst != src:
                out[src].setdefault(dst, []).extend(f"{w} ({module} -> {target})" for w in where)
    return out


@dataclass(frozen=True)
class Layer:
    rank: int
    name: str
    side: str               # "worker", "client", or "-" (shared by both)
    members: tuple[str, ...]


_ROW = re.compile(r"^\s+(\d+)\s+(\w+)\s+(worker|client|-)\s+(\S.*)$")


def layer_table(doc: str) -> list[Layer]:
    """The rows of the table in ``doc`` (a row's members may go on below it,
    on lines that hold only members)."""
    rows: list[list] = []
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split() == ["rank", "layer", "side", "packages",
                                                                      "and", "modules"])
    for line in lines[start + 1:]:
        if not line.strip():
            break
        m = _ROW.match(line)
        if m:
            rows.append([int(m.group(1)), m.group(2), m.group(3), m.group(4)])
        else:
            rows[-1][3] += " " + line.strip()
    return [Layer(rank, name, side, tuple(x.strip() for x in members.split(",") if x.strip()))
            for rank, name, side, members in rows]


def unit_of(module: str) -> str:
    """What a table row names: a top-level package or module of blockx
    (blockx.adapters.grpc.server -> blockx.adapters; blockx itself), or the
    executor package as one whole (blockx_executor.scheduler -> blockx_executor)."""
    top = module.split(".")[0]
    if top != "blockx":
        return top
    return ".".join(module.split(".")[:2])


def may_import(a: Layer, b: Layer) -> bool:
    if a == b:
        return True
    if {a.side, b.side} == {"worker", "client"}:
        return False
    return b.rank < a.rank


def layer_violations(graph: dict[str, dict[str, list[str]]], table: list[Layer]) -> list[str]:
    """Each import that goes up a layer, beside it, or across the Worker / client
    line, as "file:line: module (layer rank) -> module (layer rank)"; and each
    unit of the graph with no row."""
    of = {member: layer for layer in table for member in layer.members}
    out = [f"{unit} stands in no layer of the table: add it to a row"
           for unit in sorted({unit_of(m) for m in graph}) if unit not in of]
    for module, targets in sorted(graph.items()):
        a = of.get(unit_of(module))
        for target, where in sorted(targets.items()):
            b = of.get(unit_of(target))
            if a is None or b is None or may_import(a, b):
                continue
            out.extend(f"{w}: {module} ({a.name}, {a.rank}{', ' + a.side if a.side != '-' else ''}) -> "
                       f"{target} ({b.name}, {b.rank}{', ' + b.side if b.side != '-' else ''})" for w in where)
    return out


LAYERS = layer_table(__doc__)


def _explain(comp: list[str], graph: dict[str, dict[str, list[str]]]) -> str:
    members = set(comp)
    lines = [" <-> ".join(comp)]
    for node in comp:
        for target, where in sorted(graph[node].items()):
            if target in members:
                lines.append(f"  {node} -> {target}: {', '.join(where[:3])}")
    return "\n".join(lines)


GRAPH = import_graph()
RUNTIME = import_graph(runtime_only=True)


def test_the_scan_sees_every_kind_of_import():
    # A module of each tree, imports at the top, in a function, a dynamic load and a Cython cimport.
    assert "blockx.cli" in GRAPH and "blockx_executor.scheduler" in GRAPH
    assert any(t.startswith("blockx._fast.") for t in GRAPH.get("blockx.core.dispatch.dispatcher", {})) or \
        any(t.startswith("blockx._fast.") for m in GRAPH for t in GRAPH[m] if m.startswith("blockx.core"))
    assert "blockx.client.worker_client" in GRAPH["blockx.client"]


def test_no_cycle_between_modules():
    found = cycles(RUNTIME)
    assert not found, "import cycles between modules:\n" + "\n".join(_explain(c, RUNTIME) for c in found)


def test_no_cycle_between_packages():
    packages = package_graph(GRAPH)
    found = cycles(packages)
    assert not found, "import cycles between packages:\n" + "\n".join(_explain(c, packages) for c in found)


def test_every_import_goes_down_the_layers():
    found = layer_violations(GRAPH, LAYERS)
    assert not found, "imports against the table of layers (this file's docstring):\n" + "\n".join(found)


def test_the_table_names_only_what_exists():
    units = {unit_of(m) for m in GRAPH}
    stale = [f"{layer.name}: {member}" for layer in LAYERS for member in layer.members if member not in units]
    assert not stale, f"rows of the table name what no longer exists: {stale}"
    names = [layer.name for layer in LAYERS]
    assert len(names) == len(set(names)) and len({m for la in LAYERS for m in la.members}) == \
        sum(len(la.members) for la in LAYERS), "a layer or a member stands twice in the table"
    # the order the layers were asked for: core < plugins < adapters < app < cli, the client beside
    rank = {layer.name: layer.rank for layer in LAYERS}
    assert rank["core"] < rank["plugins"] < rank["adapters"] < rank["app"] < rank["cli"]
    side = {layer.name: layer.side for layer in LAYERS}
    assert side["client"] == "client" and {side[n] for n in ("core", "plugins", "adapters", "app")} == {"worker"}


def test_the_hot_paths_import_nothing_of_the_rest_of_blockx():
    """blockx._fast sits below every other package: the dispatcher's compiled parts,
    which take the dispatcher's records and commands, live in blockx.core.dispatch
    and cimport the hot paths, never the reverse."""
    files = module_files()
    reach = {t: w for m, targets in GRAPH.items() if package_of(m, files) == "blockx._fast"
             for t, w in targets.items() if package_of(t, files) != "blockx._fast"}
    assert not reach, f"blockx._fast imports {reach}"


# --- the checker itself finds what it must ---------------------------------------------------


def _scan(tmp_path, files: dict[str, str]):
    base = tmp_path / "pkg"
    for rel, text in files.items():
        p = base / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return import_graph({"pkg": base})


def test_a_cycle_hidden_in_a_function_is_found(tmp_path):
    g = _scan(tmp_path, {"__init__.py": "", "a.py": "from pkg import b\n",
                         "b.py": "def f():\n    from pkg.a import x\n"})
    assert cycles(g) == [["pkg.a", "pkg.b"]]


def test_a_cycle_through_a_dynamic_load_is_found(tmp_path):
    g = _scan(tmp_path, {"__init__.py": "", "core.py": "from blockx._fast import load\nm = load('hot')\n",
                         "hot.pyx": "from pkg.core cimport Thing\n"})
    # load('hot') of blockx._fast names blockx._fast.hot, not pkg.hot: outside the scanned tree.
    assert cycles(g) == []
    g = _scan(tmp_path, {"x.py": "import importlib\nimportlib.import_module('pkg.y')\n", "y.py": "import pkg.x\n"})
    assert cycles(g) == [["pkg.x", "pkg.y"]]
    # load('hot', 'pkg') names pkg.hot (and its twin pkg.hot_py), in Python and in Cython.
    g = _scan(tmp_path / "named", {"__init__.py": "", "core.py": "from blockx._fast import load\nm = load('hot', 'pkg')\n",
                                   "hot.pyx": "from pkg.core cimport Thing\n"})
    assert cycles(g) == [["pkg.core", "pkg.hot"]]
    g = _scan(tmp_path / "named_py", {"__init__.py": "", "core.py": "m = load('hot', package='pkg')\n",
                                      "hot_py.py": "from pkg.core import Thing\n"})
    assert cycles(g) == [["pkg.core", "pkg.hot_py"]]
    g = _scan(tmp_path / "named_cy", {"__init__.py": "", "core.py": "from pkg import hot\n",
                                      "hot.pyx": "m = load('core', 'pkg')\n"})
    assert cycles(g) == [["pkg.core", "pkg.hot"]]


def test_a_pure_mode_modules_cimports_count(tmp_path):
    # a.py (with a.pxd) cimports b through its .pxd only; b imports a.
    g = _scan(tmp_path, {"__init__.py": "", "a.py": "import cython\n", "a.pxd": "from pkg.b cimport T\n",
                         "b.py": "from pkg import a\n"})
    assert cycles(g) == [["pkg.a", "pkg.b"]]


def test_a_cycle_between_packages_is_found(tmp_path):
    g = _scan(tmp_path, {"__init__.py": "", "a/__init__.py": "", "a/one.py": "import pkg.b.two\n",
                         "b/__init__.py": "", "b/two.py": "import pkg.b.three\n",
                         "b/three.py": "def f():\n    from pkg.a import four\n", "a/four.py": ""})
    assert cycles(g) == []
    assert cycles(package_graph(g)) == [["pkg.a", "pkg.b"]]


def test_cython_cimports_are_edges(tmp_path):
    g = _scan(tmp_path, {"__init__.py": "", "a.pyx": "from pkg.b cimport (B,\n    C)\ncimport pkg.c\n",
                         "b.pxd": "cdef class B:\n    pass\n", "c.py": "from . import a\n"})
    assert set(g["pkg.a"]) == {"pkg.b", "pkg.c"} and set(g["pkg.c"]) == {"pkg.a"}
    assert cycles(g) == [["pkg.a", "pkg.c"]]


def test_a_type_only_import_is_no_runtime_edge_but_a_layer_dependency(tmp_path):
    files = {"__init__.py": "", "a/__init__.py": "", "a/one.py": "import pkg.b.two\n", "b/__init__.py": "",
             "b/two.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a.one import X\n"}
    g = _scan(tmp_path, files)
    assert cycles(g) == [["pkg.a.one", "pkg.b.two"]]
    runtime = import_graph({"pkg": tmp_path / "pkg"}, runtime_only=True)
    assert cycles(runtime) == [] and cycles(package_graph(g)) == [["pkg.a", "pkg.b"]]


@pytest.mark.parametrize("line", ["from pkg.q import z", "import pkg.q", "from .q import z", "from . import q"])
def test_each_spelling_of_an_import_is_an_edge(tmp_path, line):
    g = _scan(tmp_path, {"__init__.py": "", "p.py": f"def f():\n    {line}\n", "q.py": "z = 1\n"})
    assert set(g["pkg.p"]) == {"pkg.q"}


_TABLE = """
    rank  layer      side    packages and modules
    0     base       -       pkg, pkg.tls,
                             pkg.log
    1     core       worker  pkg.core
    1     client     client  pkg.client
    2     adapters   worker  pkg.adapters
    3     cli        -       pkg.cli
"""


def _layer_scan(tmp_path, files: dict[str, str]):
    base = tmp_path / "blockx"
    for rel, text in files.items():
        p = base / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    table = [Layer(la.rank, la.name, la.side, tuple(m.replace("pkg", "blockx") for m in la.members))
             for la in layer_table(_TABLE)]
    return layer_violations(import_graph({"blockx": base}), table)


def test_the_table_is_read_with_its_continuation_lines():
    table = layer_table(_TABLE)
    assert [(la.rank, la.name, la.side) for la in table][:2] == [(0, "base", "-"), (1, "core", "worker")]
    assert table[0].members == ("pkg", "pkg.tls", "pkg.log")


@pytest.mark.parametrize("importer,line", [
    ("core/state.py", "from blockx.adapters.server import x"),             # up a layer
    ("core/state.py", "def f():\n    import blockx.cli.main"),             # up, hidden in a function
    ("adapters/server.py", "from blockx.client.creds import token"),       # the Worker reads the client
    ("client/creds.py", "from blockx.core.state import x"),                # the client reads the Worker
    ("core/state.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from blockx.adapters import server"),
])
def test_an_import_against_the_layers_is_found(tmp_path, importer, line):
    files = {"__init__.py": "", "core/__init__.py": "", "core/state.py": "x = 1\n", "adapters/__init__.py": "",
             "adapters/server.py": "from blockx.core.state import x\n", "client/__init__.py": "",
             "client/creds.py": "import blockx.tls\n", "tls.py": "", "cli/__init__.py": "", "cli/main.py": ""}
    assert _layer_scan(tmp_path / "clean", files) == []
    files[importer] = files[importer] + line + "\n"
    found = _layer_scan(tmp_path / "bad", files)
    assert len(found) == 1 and f"blockx/{importer}:" in found[0], found


def test_a_package_with_no_row_is_found(tmp_path):
    found = _layer_scan(tmp_path, {"__init__.py": "", "newthing.py": "import blockx.tls\n", "tls.py": ""})
    assert found == ["blockx.newthing stands in no layer of the table: add it to a row"]


# --- no module takes another's private names -------------------------------------------------


def private_imports(trees=TREES) -> list[str]:
    """`from other import _name` anywhere (a private name is its module's own; an
    alias `import x as _x` is the importer's and fine)."""
    out = []
    for module, path in module_files(trees).items():
        source = path.read_text()
        if path.suffix in (".pyx", ".pxd"):
            found = ((t, n, line) for t, n, line in _cython_imports(source) if n)
        else:
            found = ((t, n, line) for t, n, line in _python_imports(source, module, path.stem == "__init__", False)
                     if n)
        for target, name, line in found:
            if target.split(".")[0] in trees and name.startswith("_") and not name.startswith("__") \
                    and target != module:
                out.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}: "
                           f"{target}.{name}")
    return out


def test_no_module_imports_a_private_name_of_another():
    found = private_imports()
    assert not found, "private names imported across modules (make them public, or keep them home):\n" + \
        "\n".join(found)


def test_a_private_import_is_found(tmp_path):
    base = tmp_path / "pkg"
    base.mkdir()
    (base / "__init__.py").write_text("")
    (base / "a.py").write_text("def _helper():\n    pass\n")
    (base / "b.py").write_text("def f():\n    from pkg.a import _helper\n    from pkg.a import x as _x\n")
    (base / "c.pyx").write_text("from pkg.a import _helper, ok\n")
    assert sorted(h.split(": ")[1] for h in private_imports({"pkg": base})) == ["pkg.a._helper", "pkg.a._helper"]
