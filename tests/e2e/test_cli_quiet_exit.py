"""`blockx status`, `blockx trace` and the other client commands end without asyncio
noise on stderr ("Task was destroyed but it is pending!"): the synchronous client
lets the tasks left on its event loop (grpc.aio's per-call status task) finish
before it closes the loop. The race is lost in a fraction of the runs, so each
command runs several times in fresh processes."""
import json
import os
import subprocess
import sys

import pytest

from blockx.credentials import ENV_TOKEN
from tests.support.auth import HARNESS_TOKEN

pytestmark = pytest.mark.e2e
ROUNDS = 8


def _cli(*args: str) -> subprocess.CompletedProcess:
    # No BLOCKX_* setting of the test process leaks in, but the harness worker's token
    # (the worker requires one by default).
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLOCKX_")}
    env[ENV_TOKEN] = HARNESS_TOKEN
    return subprocess.run([sys.executable, "-m", "blockx", *args], env=env, capture_output=True, text=True,
                          timeout=60)


def test_client_commands_print_nothing_but_their_own_lines_on_stderr(worker):
    addr = f"127.0.0.1:{worker.port}"
    sub = _cli("submit", "--addr", addr, "--compact", "--calls", "add:1,2")
    assert sub.returncode == 0 and sub.stderr == "", sub.stderr
    tid = json.loads(sub.stdout)["taskId"]
    for _ in range(ROUNDS):
        st = _cli("status", "--addr", addr)
        assert (st.returncode, st.stderr) == (0, ""), st.stderr
        tr = _cli("trace", tid, "--addr", addr)
        assert tr.returncode == 0, tr.stderr
        lines = tr.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"trace of task {tid}: "), tr.stderr
        res = _cli("result", tid, "--addr", addr)
        assert (res.returncode, res.stderr) == (0, ""), res.stderr
