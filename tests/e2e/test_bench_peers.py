"""`make bench-peers` without Ray (`--no-ray`): a real Worker's unary path, a
TaskSession, a second Worker with SUBMIT_LINGER_MS and the no-work gRPC floor
run the trivial jobs, 64 in flight and sequential, and the report holds every
median and ratio it names, and the floor under a one-call unary task (the gRPC
floor plus one executor round trip)."""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_bench_peers_runs_its_worker_parts_and_reports_the_ratios():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_peers.py"), "--no-ray", "--rounds", "2",
                          "--tasks", "200", "--seq-tasks", "10", "--uds-round-trips", "5000", "--linger-ms", "4", "--timeout", "120"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["ray"] is None and len(report["rounds"]) == 2
    for wl in ("inflight", "sequential"):
        assert set(report["median"][wl]) == {"unary", "session", "unary_linger", "grpc_floor"}
        for figures in report["median"][wl].values():
            assert figures["tasks_per_s"] > 0 and figures["server_cpu_us_per_task"] >= 0
        assert set(report["ratios"][wl]) == {"unary/session", "unary/grpc_floor", "unary_linger/unary"}
        assert all(r > 0 for r in report["ratios"][wl].values())
    floor = report["floor"]
    assert floor["uds_round_trip_cpu_us"] > 0        # 5,000 round trips take well over os.times' tick
    assert all(r["uds_floor"]["round_trips_per_s"] > 0 for r in report["rounds"])
    for wl in ("inflight", "sequential"):
        f = floor[wl]
        assert f["unary_floor_cpu_us"] == round(
            report["median"][wl]["grpc_floor"]["server_cpu_us_per_task"] + floor["uds_round_trip_cpu_us"], 1)
        assert f["unary_cpu_us"] == report["median"][wl]["unary"]["server_cpu_us_per_task"]
    # the order rotates from round to round, so no system always runs first
    assert report["rounds"][0]["order"][0] != report["rounds"][1]["order"][0]
    assert "jobs/s" in out.stderr and "unary/session" in out.stderr and "floor of a one-call unary task" in out.stderr
