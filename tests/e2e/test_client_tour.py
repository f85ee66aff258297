"""docs/client.md's client example is examples/client_tour.py, and it runs against a real worker."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from tests.e2e.conftest import make_functions_dir
from tests.e2e.spawn_modes import SPAWN_MODES, spawn_env
from tests.support.worker import WorkerProcess

pytestmark = pytest.mark.e2e
ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_docs_example_is_the_shipped_file():
    readme = (ROOT / "docs" / "client.md").read_text()
    block = re.search(r"```python\n(# examples/client_tour.py.*?)```", readme, re.S)
    assert block is not None, "docs/client.md lost its client example"
    assert block.group(1) == (ROOT / "examples" / "client_tour.py").read_text()


@pytest.fixture(scope="module", params=SPAWN_MODES)
def tour_worker(request, tmp_path_factory):
    """The tour gives the same outputs in both spawn modes."""
    if request.param == "process":
        yield request.getfixturevalue("worker")
        return
    w = WorkerProcess({"TASK_SLOTS": "32", "RESULT_RETENTION_MS": "60000", **spawn_env(request.param)},
                      functions_dir=make_functions_dir(tmp_path_factory.mktemp("fn-tour")))
    w.start()
    try:
        yield w
    finally:
        w.stop()


def test_the_client_tour_runs(tour_worker):
    worker = tour_worker
    env = {**os.environ, "BLOCKX_ADDR": f"127.0.0.1:{worker.port}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "client_tour.py")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"SUCCEEDED [3, 42] 127.0.0.1:{worker.port}"
    assert lines[1] == str([i * i for i in range(10)])
    assert lines[2:4] == ["RUNNING False", "SUCCEEDED True"]
    assert lines[4].startswith("NotFound: task 'no-such-task' is not known")
    assert lines[5] == "[285]"
    assert lines[6] == "True 10"            # the task's trace: complete, its ten subcalls
    assert lines[7] == "CALL_FAILED RuntimeError: bad input"     # result() raised TaskFailed
