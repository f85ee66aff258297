"""Build script: compiles the Cython hot paths (blockx/_fast, and the dispatcher's
compiled parts in blockx/core/dispatch) and generates the
gRPC code from proto/ (the generated *_pb2*.py files are never committed)."""
import glob
import os
import subprocess
import sys

from setuptools import setup, find_packages
from setuptools.command.build_py import build_py
from setuptools.command.egg_info import egg_info
from Cython.Build import cythonize

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOS = sorted(glob.glob(os.path.join("proto", "blockx", "**", "*.proto"), recursive=True))


def generate_protos():
    """Generate blockx/worker/v1/worker_pb2{,_grpc}.py (+ .pyi) into the package tree.

    protoc is run with -Iproto and --python_out=., so the generated module path
    (blockx.worker.v1) lands inside the blockx package itself."""
    if not PROTOS:
        return
    outs = [p.replace("proto" + os.sep, "", 1)[: -len(".proto")] + "_pb2.py" for p in PROTOS]
    if all(os.path.exists(os.path.join(HERE, o)) and
           os.path.getmtime(os.path.join(HERE, o)) >= os.path.getmtime(os.path.join(HERE, p))
           for o, p in zip(outs, PROTOS)):
        return
    cmd = [sys.executable, "-m", "grpc_tools.protoc", "-Iproto", "--python_out=.",
           "--pyi_out=.", "--grpc_python_out=."] + PROTOS
    subprocess.check_call(cmd, cwd=HERE)


class BuildPy(build_py):
    def run(self):
        generate_protos()
        super().run()


class EggInfo(egg_info):
    def run(self):
        generate_protos()
        super().run()


generate_protos()

# The hot paths of blockx/_fast (which import nothing from the rest of blockx),
# and the dispatcher's compiled parts in blockx/core/dispatch (which cimport them).
COMPILED_DIRS = (os.path.join("blockx", "_fast"), os.path.join("blockx", "core", "dispatch"))


def compiled_sources():
    """Every .pyx, and every .py in Cython's pure-Python mode: a NAME.py with a
    NAME.pxd beside it (and no NAME.pyx), compiled to the extension NAME."""
    out = []
    for d in COMPILED_DIRS:
        out += glob.glob(os.path.join(d, "*.pyx"))
        out += [py for py in glob.glob(os.path.join(d, "*.py"))
                if os.path.exists(py[:-3] + ".pxd") and not os.path.exists(py[:-3] + ".pyx")]
    return sorted(out)


extensions = cythonize(
    compiled_sources(),
    compiler_directives={
        "language_level": "3",
        "boundscheck": False,
        "wraparound": False,
        "cdivision": True,
        "initializedcheck": False,
    },
    quiet=True,
    nthreads=min(4, os.cpu_count() or 1),
)

setup(
    # blockx.examples.functions has no __init__.py (a functions directory, not a
    # package) but ships in the wheel: the worker can serve it (FUNCTIONS_DIR).
    packages=find_packages(include=["blockx", "blockx.*"]) + ["blockx.examples.functions", "blockx_executor"],
    package_dir={"blockx_executor": "executor/blockx_executor"},
    # py.typed and the .pyi stubs (of the compiled hot paths and the generated gRPC
    # code) make the installed package typed; MANIFEST.in lists the sdist's files.
    package_data={"blockx._fast": ["*.pxd", "*.pyx", "*.pyi"],
                  "blockx.core.dispatch": ["*.pxd", "*.pyx", "*.pyi"], "blockx": ["py.typed", "examples/functions/*.py"],
                  "blockx.worker.v1": ["*.pyi"], "blockx_executor": ["py.typed"],
                  "blockx.dashboard": ["static/*.html", "static/*.js", "static/*.css", "static/*.svg"]},
    ext_modules=extensions,
    # Compile the extensions two at a time (`make build`, and a wheel build).
    options={"build_ext": {"parallel": min(4, os.cpu_count() or 1)}},
    cmdclass={"build_py": BuildPy, "egg_info": EggInfo},
    zip_safe=False,
)
