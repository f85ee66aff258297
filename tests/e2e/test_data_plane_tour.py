"""docs/data-plane.md's bundle tour, run as written against a real bundle Worker (DuckDB
only): the Parquet file, the bundleScan -> tableUpserts submit (twice) and the
sql_query check."""
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e
ROOT = pathlib.Path(__file__).resolve().parents[2]


def tour_blocks() -> list[str]:
    page = (ROOT / "docs" / "data-plane.md").read_text()
    section = page.split("## A bundle tour (DuckDB only)", 1)[1]
    return re.findall(r"```sh[^\n]*\n(.*?)```", section, re.S)[:2]


def commands(block: str) -> list[list[str]]:
    text = block.replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in text.splitlines() if line.strip()]


def test_the_docs_bundle_tour_runs(start_worker, tmp_path):
    setup, client = tour_blocks()
    setup_cmds = commands(setup.replace("/tmp/blockx-tour", str(tmp_path)))
    subprocess.run(setup_cmds[0], check=True)                                         # mkdir
    py = setup_cmds[1]
    assert py[0] == ".venv/bin/python"
    subprocess.run([sys.executable] + py[1:], check=True, cwd=ROOT)                   # the Parquet file
    serve = setup_cmds[2]
    env = dict(a.split("=", 1) for a in serve if "=" in a and not a.startswith("ARGS"))
    env["FUNCTIONS_DIR"] = str(ROOT / env["FUNCTIONS_DIR"])       # as written, from the repository root
    assert serve[-1] == "ARGS=--profile bundle"
    w = start_worker({k: v for k, v in env.items() if k != "EXECUTOR_COUNT"}, profile="bundle")
    outs = []
    submits = [c for c in commands(client) if c[0] != "export"]   # export STATE_DIR: the harness has the token
    for cmd in submits + submits[:1]:                             # the upsert runs twice
        assert cmd[:2] == [".venv/bin/blockx", "submit"]
        r = subprocess.run([sys.executable, "-m", "blockx", "submit", "--addr", f"127.0.0.1:{w.port}", *cmd[2:]],
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert r.returncode == 0, r.stdout + r.stderr
        outs.append(json.loads(r.stdout))
    upsert, query, again = outs
    assert upsert["state"] == "SUCCEEDED" and again["state"] == "SUCCEEDED"
    assert "1000 rows written to squares" in json.dumps(upsert)
    assert query["state"] == "SUCCEEDED"
    assert query["result"]["outputs"] == [[{"n": 1000, "s": 332833500}]]
    assert os.path.exists(tmp_path / "state" / "local.duckdb")
