"""`make bench`'s (r) against a real ganache node on a token-mode Worker (the
default): its client sends the worker's token, so the scenario runs and reports
its reads (it once opened its client without it, was refused UNAUTHENTICATED, and
the whole default run printed nothing but that error)."""
import json
import pathlib
import subprocess
import sys

from tests.support.ganache import ganache_bin

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_rpc_scenario_runs_on_a_token_worker():
    assert ganache_bin() is not None, "ganache is not installed: run `make ganache`"
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "e2e_load.py"), "--quick", "--only", "r",
                          "--timeout", "150"], capture_output=True, text=True, timeout=240, cwd=ROOT)
    report = json.loads(out.stdout)
    assert out.returncode == 0 and report["errors"] == [], (report.get("errors"), out.stderr[-2000:])
    assert report["auth"] == "token"
    r = report["results"]["r_rpc"]
    for part in ("worker_uncached", "worker_repeat", "worker_uncached_max_batch_1"):
        assert r[part]["reads"] == 16 * 25 and r[part]["reads_per_s"] > 0
    assert 0 < r["worker_repeat"]["cache_hit_rate"] <= 1
