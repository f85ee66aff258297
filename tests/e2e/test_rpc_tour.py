"""docs/functions.md's rpc tour, run as written: the ganache command line (on a free
port instead of 8545), the Worker's environment, and the submit with its two
outputs."""
import json
import pathlib
import re
import shlex
import subprocess
import sys
import time

import pytest

from tests.support.etcd import free_port
from tests.support.ganache import GanacheNode

pytestmark = pytest.mark.e2e
ROOT = pathlib.Path(__file__).resolve().parents[2]


def tour() -> tuple[str, list[str]]:
    page = (ROOT / "docs" / "functions.md").read_text()
    section = page.split("## The rpc IO backend", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh[^\n]*\n(.*?)```", section, re.S)
    outputs = re.findall(r"^The outputs are `(.*?)` \(1000 ETH in wei\) and\n`(.*?)`$", section, re.M | re.S)
    return blocks, list(outputs[0])


def commands(block: str) -> list[list[str]]:
    text = block.replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in text.splitlines() if line.strip()]


def test_the_docs_rpc_tour_runs(start_worker):
    (setup, client), want = tour()
    node_cmd, serve = commands(setup)
    assert node_cmd[0] == ".npm-tools/node_modules/.bin/ganache" and node_cmd[-1] == "&"
    port = free_port()
    node = GanacheNode()
    node.port = port
    # the page's own flags, on a free port, started and waited for by the harness
    flags = [a if a != "8545" else str(port) for a in node_cmd[1:-1]]
    assert flags[:1] == ["--wallet.deterministic"] and "--server.port" in flags
    proc = subprocess.Popen([node.bin, *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                node.call("eth_blockNumber")
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "ganache did not start"
                time.sleep(0.1)
        env = dict(a.split("=", 1) for a in serve if "=" in a and not a.startswith("ARGS"))
        assert serve[-1] == "serve" and env["NODE_TOKEN"] == "secret"
        env["RPC_ENDPOINTS"] = env["RPC_ENDPOINTS"].replace("8545", str(port))
        w = start_worker({k: v for k, v in env.items() if k not in ("EXECUTOR_COUNT", "ETCD_ENDPOINTS")})
        (cmd,) = commands(client)
        assert cmd[:2] == [".venv/bin/blockx", "submit"]
        r = subprocess.run([sys.executable, "-m", "blockx", "submit", "--addr", f"127.0.0.1:{w.port}", *cmd[2:]],
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert r.returncode == 0, r.stdout + r.stderr
        out = json.loads(r.stdout)
        assert out["state"] == "SUCCEEDED", out
        assert out["result"]["outputs"] == [json.loads(x) for x in want]
    finally:
        proc.terminate()
        proc.wait(10)
        node.close()
