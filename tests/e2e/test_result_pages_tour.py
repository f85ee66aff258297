"""docs/grpc.md's paging example is examples/result_pages_tour.py, and it runs against a real worker."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e
ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_docs_example_is_the_shipped_file():
    readme = (ROOT / "docs" / "grpc.md").read_text()
    block = re.search(r"```python\n(# examples/result_pages_tour.py.*?)```", readme, re.S)
    assert block is not None, "docs/grpc.md lost its paging example"
    assert block.group(1) == (ROOT / "examples" / "result_pages_tour.py").read_text()


def test_the_paging_tour_runs(worker):
    env = {**os.environ, "BLOCKX_ADDR": f"127.0.0.1:{worker.port}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "result_pages_tour.py")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "SUCCEEDED 300000 True",
        "300000 [0, 1, 2] 299999",
        "299998 [b'299998', b'299999'] False",
        "True",
    ]
