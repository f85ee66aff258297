"""The fleet at a glance, on three real workers in a real etcd: `blockx status
--etcd` and `blockx top --etcd` show every one in one table (a worker that stops
answering is UNREACHABLE without holding the table up, one that leaves is GONE
in top), the heartbeat carries metricsAddr, and `blockx workers --prometheus-sd`
prints a file_sd target list that Prometheus' own promtool accepts."""
import io
import json
import shutil
import signal
import subprocess
import threading
import time

import pytest

from blockx.cli import build_parser, main
from tests.support.etcd import EtcdServer
from tests.support.fleet import registry, start_workers

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def etcd():
    with EtcdServer() as server:
        yield server


def run_cli(argv, capsys):
    code = main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def table_rows(out: str) -> dict[str, list[str]]:
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["WORKER", "STATE"]
    return {ln.split()[0]: ln.split() for ln in lines[1:] if ln[:1].isdigit() and ":" in ln.split()[0]}


def test_status_top_and_prometheus_sd_over_three_workers(etcd, functions_dir, tmp_path, capsys):
    workers = start_workers(etcd, 3, functions_dir, {"TASK_SLOTS": "5"})
    addrs = {f"127.0.0.1:{w.port}": w for w in workers}
    try:
        reg = registry(etcd)
        for addr, w in addrs.items():
            assert reg[addr]["metricsAddr"] == f"127.0.0.1:{w.metrics_port}"
            assert (reg[addr]["tls"], reg[addr]["authMode"], reg[addr]["etcdSecurity"]) == ("off", "token",
                                                                                           "plaintext")
        w0 = workers[0]
        w0.submit_calls("busy", [("sleep_ms", [3000])])

        code, out, err = run_cli(["status", "--etcd", etcd.endpoint], capsys)
        assert code == 0, err
        rows = table_rows(out)
        assert set(rows) == set(addrs)
        for addr, row in rows.items():
            assert row[1] == "ready"
            running = "1" if addr == f"127.0.0.1:{w0.port}" else "0"
            assert row[2:6] == [f"{5 - int(running)}/5", running, running, "1/1"], row
            assert row[-3:] == ["off", "token", "plaintext"]
        assert "3 worker(s) registered, 3 answered" in out

        code, out, err = run_cli(["status", "--etcd", etcd.endpoint, "--json"], capsys)
        assert code == 0, err
        obj = json.loads(out)
        assert set(obj) == set(addrs) and all(v["status"]["slots"]["total"] == 5 for v in obj.values())

        # A worker that stops answering (SIGSTOP: its port still accepts, nothing replies)
        # is shown as such, within the bounded timeout, while the others are read.
        frozen = workers[1]
        frozen.signal(signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            code, out, err = run_cli(["status", "--etcd", etcd.endpoint, "--rpc-timeout", "1"], capsys)
            took = time.monotonic() - t0
        finally:
            frozen.signal(signal.SIGCONT)
        assert code == 0, err
        rows = table_rows(out)
        assert rows[f"127.0.0.1:{frozen.port}"][1] == "UNREACHABLE"
        assert sorted(r[1] for a, r in rows.items() if a != f"127.0.0.1:{frozen.port}") == ["ready", "ready"]
        assert "3 worker(s) registered, 2 answered" in out
        reason = [ln for ln in out.splitlines() if ln.startswith(f"  127.0.0.1:{frozen.port}: ")]
        assert len(reason) == 1 and "within 1" in reason[0], out
        assert took < 4, f"the table waited {took:.1f}s for a frozen worker"

        # The Prometheus file_sd target list: every worker's metrics address with its labels.
        code, out, err = run_cli(["workers", "--etcd", etcd.endpoint, "--prometheus-sd"], capsys)
        assert code == 0, err
        groups = json.loads(out)
        assert sorted(g["targets"][0] for g in groups) == sorted(f"127.0.0.1:{w.metrics_port}" for w in workers)
        for g in groups:
            assert set(g) == {"targets", "labels"} and len(g["targets"]) == 1
            assert g["labels"]["workerId"] in addrs and g["labels"]["deployment"] == "block"
            assert addrs[g["labels"]["workerId"]].metrics_port == int(g["targets"][0].rsplit(":", 1)[1])
        sd = tmp_path / "blockx-workers.json"
        sd.write_text(out)
        promtool = shutil.which("promtool")
        if promtool:
            cfg = tmp_path / "prometheus.yml"
            cfg.write_text(f"scrape_configs:\n  - job_name: blockx\n    file_sd_configs:\n      - files: ['{sd}']\n")
            r = subprocess.run([promtool, "check", "config", str(cfg)], capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, r.stdout + r.stderr
            bad = tmp_path / "bad.json"
            bad.write_text(json.dumps([{"targets": ["no port here:::"], "labels": {"0bad": "x"}}]))
            cfg.write_text(f"scrape_configs:\n  - job_name: blockx\n    file_sd_configs:\n      - files: ['{bad}']\n")
            r = subprocess.run([promtool, "check", "config", str(cfg)], capture_output=True, text=True, timeout=30)
            assert r.returncode != 0, "promtool checks the target file (so the check above means something)"

        # top --etcd: live rows; a worker that leaves the registry stays on screen as GONE.
        ns = build_parser().parse_args(["top", "--etcd", etcd.endpoint, "--interval", "0.4",
                                        "--iterations", "12", "--rpc-timeout", "1"])
        buf = io.StringIO()
        from blockx.cli.fleet_status import cmd_top_fleet
        th = threading.Thread(target=cmd_top_fleet, args=(ns, buf))
        th.start()
        time.sleep(1.2)
        leaving = workers[2]
        leaving.stop()
        th.join(30)
        assert not th.is_alive()
        frames = [f for f in buf.getvalue().split("refresh 0.4s\n") if f.strip()]
        assert len(frames) == 12
        first, last = table_rows(frames[0]), table_rows(frames[-1])
        assert set(first) == set(addrs) and all(r[1] == "ready" for r in first.values())
        assert last[f"127.0.0.1:{leaving.port}"][1] == "GONE"
        assert sorted(r[1] for a, r in last.items() if a != f"127.0.0.1:{leaving.port}") == ["ready", "ready"]
        assert "2 worker(s) registered, 2 answered" in frames[-1]
        rated = table_rows(frames[2])[f"127.0.0.1:{w0.port}"]
        assert rated[6] != "-" and rated[7] != "-", "top shows rates between two reads"
    finally:
        for w in workers:
            w.stop()
