"""A client install has none of the Worker's dependencies: the client library and
the CLI import without them, and `blockx serve` says what to install (in a
subprocess whose import system refuses the `worker` extra's modules)."""
import subprocess
import sys

from blockx.extras import EXTRAS

BLOCKER = """
import importlib.abc, sys
BLOCKED = %r
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Refuse())
""" % (sorted(EXTRAS["worker"]),)


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKER + code], capture_output=True, text=True, timeout=60)


def test_the_client_and_the_cli_import_without_the_worker_extra():
    out = _run("import blockx.client, blockx.cli, blockx.cli.fleet, blockx.cli.status, blockx.cli.trace\n"
               "from blockx.client import Cluster, WorkerClient, connect\n"
               "blockx.cli.build_parser()\n"
               "print(sorted(m for m in sys.modules if m.split('.')[0] in BLOCKED))")
    assert (out.returncode, out.stdout.strip()) == (0, "[]"), out.stderr


def test_blockx_serve_names_the_missing_packages_and_the_install_command():
    # find_spec of blockx.extras asks the finders too, so the refusal shows there.
    out = _run("import importlib.util\n"
               "_orig = importlib.util.find_spec\n"
               "def find_spec(name, package=None):\n"
               "    return None if name.split('.')[0] in BLOCKED else _orig(name, package)\n"
               "importlib.util.find_spec = find_spec\n"
               "from blockx.cli import main\n"
               "sys.exit(main(['serve']))")
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: `blockx serve` needs the 'worker' extra of blockx-worker, and ")
    assert "uvloop" in out.stderr and "pip install 'blockx-worker[worker]'" in out.stderr


def test_a_dotted_module_whose_parent_is_missing_counts_as_missing():
    # find_spec("a.b") imports "a" and raises when it is not installed: the worker
    # extra lists such names (opentelemetry.sdk), and a base install has no parent.
    from blockx.extras import missing
    EXTRAS["_probe"] = {"blockx_no_such_package.sub": "blockx-no-such-package"}
    try:
        assert missing("_probe") == ["blockx-no-such-package"]
    finally:
        del EXTRAS["_probe"]
