"""The fleet-at-a-glance pieces that need no server: the advertised metrics
address, the Prometheus file_sd groups, and the table's rows for a worker that
answered, one that did not and one that left."""
from blockx.app.metrics_addr import advertised_metrics_addr
from blockx.cli.fleet_status import FleetRow, fleet_table
from blockx.cli.prometheus_sd import prometheus_sd
from blockx.client.registry import WorkerInfo
from blockx.worker.v1 import worker_pb2 as pb


def test_the_metrics_address_takes_the_worker_host_for_a_wildcard_listen():
    assert advertised_metrics_addr("127.0.0.1:0", 9464, "10.0.0.5:8081") == "127.0.0.1:9464"
    assert advertised_metrics_addr("0.0.0.0:9464", 9464, "10.0.0.5:8081") == "10.0.0.5:9464"
    assert advertised_metrics_addr("[::]:9464", 9464, "[fd00::5]:8081") == "[fd00::5]:9464"
    assert advertised_metrics_addr("", 0, "10.0.0.5:8081") == ""


def _info(addr, hb):
    import orjson
    return WorkerInfo.parse(addr, orjson.dumps(hb), 1, 0.0)


def test_prometheus_sd_lists_workers_with_a_metrics_address_and_their_labels():
    infos = [_info("10.0.0.2:8081", {"metricsAddr": "10.0.0.2:9464", "deployment": "block", "zone": "z1"}),
             _info("10.0.0.1:8081", {"metricsAddr": "10.0.0.1:9464", "instance": "w-1", "zone": 5}),
             _info("10.0.0.3:8081", {"metricsAddr": ""})]
    assert prometheus_sd(infos) == [
        {"targets": ["10.0.0.1:9464"], "labels": {"workerId": "10.0.0.1:8081", "instance": "w-1"}},
        {"targets": ["10.0.0.2:9464"], "labels": {"workerId": "10.0.0.2:8081", "deployment": "block",
                                                   "zone": "z1"}}]


def test_the_table_shows_answered_unreachable_and_gone_workers():
    st = pb.WorkerStatus(worker_addr="a:1", ready=True, uptime_ms=10_000,
                         slots=pb.SlotCounts(total=4, free=3, running=1),
                         executors=[pb.ExecutorStatus(healthy=True), pb.ExecutorStatus(healthy=False)],
                         counters=pb.WorkerCounters(tasks_succeeded=15, tasks_failed=5, calls_completed=100))
    st.tasks_by_phase["CALLS"] = 1
    sec = {"tls": "on", "authMode": "token", "etcdSecurity": "mtls,user=w"}
    text = fleet_table([FleetRow("a:1", sec, st), FleetRow("b:1", {**sec, "freeSlots": 2, "taskSlots": 4},
                                                           None, "UNAVAILABLE: down"),
                        FleetRow("c:1", sec, gone=True)])
    lines = text.splitlines()
    assert lines[1].split() == ["a:1", "ready", "3/4", "1", "1", "1/2", "2.0", "10.0", "on", "token", "mtls,user=w"]
    assert lines[2].split() == ["b:1", "UNREACHABLE", "2/4", "-", "-", "?/?", "-", "-", "on", "token",
                                "mtls,user=w"]
    assert lines[3].split()[:2] == ["c:1", "GONE"]
    assert lines[4] == "2 worker(s) registered, 1 answered"
    assert lines[5] == "  b:1: UNAVAILABLE: down"
    evil = fleet_table([FleetRow("x\x1b[2J:1", {}, None, "boom\x1b[H")])
    assert "\x1b" not in evil, "addresses and errors are escaped for the terminal"
