"""`make bench`'s (l) at --quick sizes: sequential one-call tasks over the unary
path and over a session on a real Worker, each task's spans read back through
GetTaskTrace, beside the floors measured in the same run (a Unix-socket round
trip, grpc.aio unary, SubmitTask + WatchTasks and bidi ping-pongs against the
no-work server), with --l-baseline naming this checkout (an A/A run: the block
docs/performance.md shows). The figures are not judged (speed is the benchmark's
business): every span and floor must be there, for both Workers, and make sense
together."""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPANS = ("task", "activation", "builder", "calls", "call", "plugin")


def test_the_latency_budget_reports_every_span_beside_the_floors():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "e2e_load.py"), "--quick", "--only", "l",
                          "--l-baseline", ".", "--timeout", "150"], capture_output=True, text=True, timeout=240, cwd=ROOT)
    report = json.loads(out.stdout)
    assert out.returncode == 0 and report["errors"] == [], (report.get("errors"), out.stderr[-2000:])
    res = report["results"]["l_latency_budget"]
    assert res["tasks_each_way"] == 50 and res["workers"] == ["worker", "baseline"]
    for label, way in ((label, way) for label in res["workers"] for way in ("unary", "session")):
        r = res[label][way]
        med = r["span_median_us"]
        assert set(med) == set(SPANS) and all(v > 0 for v in med.values()), med
        # in every task each phase lies inside the task and the call inside the Calls
        # phase, so their medians keep that order
        assert all(med[s] <= med["task"] for s in SPANS) and med["call"] <= med["calls"]
        assert r["client_p50_us"] > 0
    f = res["floors"]
    assert f["uds_round_trip_us"] > 0 and f["uds"]["round_trips_per_s"] > 0
    g = f["grpc"]
    assert g["round_trips"] == 200
    assert 0 < g["unary_p50_us"] <= g["submit_watch_p50_us"] and g["bidi_p50_us"] > 0
    assert res["worker"]["call_over_uds_floor"]["unary"] > 0
    assert "(l) one-call task" in out.stderr and "activation" in out.stderr
