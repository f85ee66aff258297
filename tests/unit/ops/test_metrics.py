"""Metrics: exposition names and values, callbacks, HTTP endpoint binding."""

from __future__ import annotations

import socket
import threading
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from blockx.adapters.telemetry.metrics import ETCD_STATES, Metrics, parse_listen_addr

REQUIRED_FAMILIES = {
    # family name as parsed (counters without _total) -> type
    "blockx_slots": "gauge",
    "blockx_tasks_terminal": "counter",
    "blockx_task_phase_duration_seconds": "histogram",
    "blockx_calls_dispatched": "counter",
    "blockx_calls_completed": "counter",
    "blockx_calls_failed": "counter",
    "blockx_calls_retried": "counter",
    "blockx_call_cache_hits": "counter",
    "blockx_singleflight_waiters": "counter",
    "blockx_executors_healthy": "gauge",
    "blockx_executor_restarts": "counter",
    "blockx_executor_wedge_kills": "counter",
    "blockx_executor_heartbeat_timeouts": "counter",
    "blockx_executor_attach_refused": "counter",
    "blockx_executor_frames_refused": "counter",
    "blockx_uds_frames": "counter",
    "blockx_uds_bytes": "counter",
    "blockx_outbox_depth": "gauge",
    "blockx_etcd_registration_state": "gauge",
    "blockx_tasks_submitted": "counter",
    "blockx_grpc_requests": "counter",
}


def samples(m: Metrics) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(m.render().decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def families(m: Metrics) -> dict[str, str]:
    return {f.name: f.type for f in text_string_to_metric_families(m.render().decode())}


def test_all_required_families_with_types():
    fams = families(Metrics())
    for name, typ in REQUIRED_FAMILIES.items():
        assert fams.get(name) == typ, name
    assert "process_resident_memory_bytes" in fams  # process metrics in our own registry


def test_fresh_values_are_zero_and_states_enumerated():
    s = samples(Metrics(process_metrics=False))
    assert s[("blockx_calls_dispatched_total", ())] == 0
    assert s[("blockx_slots", (("state", "free"),))] == 0
    for state in ETCD_STATES:
        want = 1.0 if state == "idle" else 0.0
        assert s[("blockx_etcd_registration_state", (("state", state),))] == want


def test_plain_int_bumps_are_exported():
    m = Metrics(process_metrics=False)
    m.calls_dispatched += 7
    m.calls_completed += 5
    m.calls_retried += 2
    m.call_cache_hits += 3
    m.singleflight_waiters += 4
    m.executor_restarts += 1
    m.executor_wedge_kills += 1
    m.executor_heartbeat_timeouts += 2
    m.tasks_submitted += 9
    m.uds_frames_in += 10
    m.uds_frames_out += 11
    m.uds_bytes_in += 1000
    m.uds_bytes_out += 2000
    m.executors_healthy = 8
    m.outbox_depth = 17
    m.slots_fn = lambda: {"free": 40, "allocated": 3, "running": 7}
    m.set_etcd_state("retrying")
    s = samples(m)
    assert s[("blockx_calls_dispatched_total", ())] == 7
    assert s[("blockx_calls_completed_total", ())] == 5
    assert s[("blockx_calls_retried_total", ())] == 2
    assert s[("blockx_call_cache_hits_total", ())] == 3
    assert s[("blockx_singleflight_waiters_total", ())] == 4
    assert s[("blockx_executor_restarts_total", ())] == 1
    assert s[("blockx_executor_wedge_kills_total", ())] == 1
    assert s[("blockx_executor_heartbeat_timeouts_total", ())] == 2
    assert s[("blockx_tasks_submitted_total", ())] == 9
    assert s[("blockx_uds_frames_total", (("direction", "in"),))] == 10
    assert s[("blockx_uds_frames_total", (("direction", "out"),))] == 11
    assert s[("blockx_uds_bytes_total", (("direction", "in"),))] == 1000
    assert s[("blockx_uds_bytes_total", (("direction", "out"),))] == 2000
    assert s[("blockx_executors_healthy", ())] == 8
    assert s[("blockx_outbox_depth", ())] == 17
    assert s[("blockx_slots", (("state", "allocated"),))] == 3
    assert s[("blockx_slots", (("state", "running"),))] == 7
    assert s[("blockx_etcd_registration_state", (("state", "retrying"),))] == 1
    assert s[("blockx_etcd_registration_state", (("state", "idle"),))] == 0


def test_labelled_counters():
    m = Metrics(process_metrics=False)
    m.calls_failed["USER_ERROR"] += 2
    m.call_failed("EXECUTOR_LOST")
    m.task_terminal("SUCCEEDED")
    m.task_terminal("FAILED", "TIMED_OUT")
    m.task_terminal("FAILED", "TIMED_OUT")
    m.grpc_request("SubmitTask", "OK")
    m.grpc_requests[("RequestTaskSlot", "RESOURCE_EXHAUSTED")] += 3
    s = samples(m)
    assert s[("blockx_calls_failed_total", (("error_kind", "USER_ERROR"),))] == 2
    assert s[("blockx_calls_failed_total", (("error_kind", "EXECUTOR_LOST"),))] == 1
    assert s[("blockx_tasks_terminal_total", (("failure_code", ""), ("state", "SUCCEEDED")))] == 1
    assert s[("blockx_tasks_terminal_total", (("failure_code", "TIMED_OUT"), ("state", "FAILED")))] == 2
    assert s[("blockx_grpc_requests_total", (("code", "OK"), ("method", "SubmitTask")))] == 1
    assert s[("blockx_grpc_requests_total", (("code", "RESOURCE_EXHAUSTED"), ("method", "RequestTaskSlot")))] == 3


def test_phase_histogram():
    m = Metrics(process_metrics=False)
    m.observe_phase("calls", 0.3)
    m.observe_phase("calls", 2.0)
    m.observe_phase("builder", 0.001)
    s = samples(m)
    assert s[("blockx_task_phase_duration_seconds_count", (("phase", "calls"),))] == 2
    assert s[("blockx_task_phase_duration_seconds_sum", (("phase", "calls"),))] == pytest.approx(2.3)
    assert s[("blockx_task_phase_duration_seconds_bucket", (("le", "0.5"), ("phase", "calls")))] == 1
    assert s[("blockx_task_phase_duration_seconds_bucket", (("le", "+Inf"), ("phase", "calls")))] == 2
    assert s[("blockx_task_phase_duration_seconds_count", (("phase", "builder"),))] == 1


def test_callbacks_read_at_scrape_time_and_failures_are_contained():
    m = Metrics(process_metrics=False)
    depth = [3]
    m.outbox_depth_fn = lambda: depth[0]
    m.slots_fn = lambda: {"free": 1, "running": 4}
    m.executors_healthy_fn = lambda: 1 // 0
    m.calls_completed = 6
    s = samples(m)
    assert s[("blockx_outbox_depth", ())] == 3
    assert s[("blockx_slots", (("state", "running"),))] == 4
    assert s[("blockx_slots", (("state", "allocated"),))] == 0
    assert ("blockx_executors_healthy", ()) not in s  # its sample is dropped ...
    assert s[("blockx_calls_completed_total", ())] == 6  # ... the rest of the scrape is not
    depth[0] = 9
    assert samples(m)[("blockx_outbox_depth", ())] == 9


def test_instances_have_independent_registries():
    a, b = Metrics(process_metrics=False), Metrics(process_metrics=False)
    a.calls_dispatched = 5
    a.observe_phase("total", 1.0)
    assert samples(b)[("blockx_calls_dispatched_total", ())] == 0
    assert ("blockx_task_phase_duration_seconds_count", (("phase", "total"),)) not in samples(b)


def test_unknown_etcd_state_rejected():
    with pytest.raises(ValueError, match="unknown etcd registration state"):
        Metrics(process_metrics=False).set_etcd_state("sleeping")


def test_scrape_while_another_thread_adds_labels():
    m = Metrics(process_metrics=False)
    stop = threading.Event()
    errors: list[BaseException] = []

    def scrape():
        try:
            while not stop.is_set():
                m.render()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=scrape)
    t.start()
    try:
        for i in range(20000):
            m.calls_failed[f"K{i % 500}"] += 1
            m.grpc_requests[("M", str(i))] += 1
    finally:
        stop.set()
        t.join()
    assert errors == []
    assert samples(m)[("blockx_calls_failed_total", (("error_kind", "K0"),))] == 40


def test_http_endpoint_binds_only_the_given_address():
    m = Metrics(process_metrics=False)
    m.calls_dispatched = 42
    port = m.start_http("127.0.0.1:0")
    try:
        assert m._http_server.server_address[0] == "127.0.0.1"
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        assert b"blockx_calls_dispatched_total 42.0" in body
        with pytest.raises(RuntimeError, match="already started"):
            m.start_http("127.0.0.1:0")
    finally:
        m.stop_http()
    assert m.http_port is None
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_http_port_in_use_is_a_clear_error():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            Metrics(process_metrics=False).start_http(f"127.0.0.1:{port}")


@pytest.mark.parametrize(("addr", "want"), [
    ("127.0.0.1:9464", ("127.0.0.1", 9464)),
    ("[::1]:9464", ("::1", 9464)),
    (":9464", ("0.0.0.0", 9464)),
    ("localhost:0", ("localhost", 0)),
])
def test_parse_listen_addr(addr, want):
    assert parse_listen_addr(addr) == want


@pytest.mark.parametrize("bad", ["9464", "host:http", "h:70000", "", "h:-1"])
def test_parse_listen_addr_rejects(bad):
    with pytest.raises(ValueError, match="metrics address"):
        parse_listen_addr(bad)


# ---- executor resources and readiness ----

def test_executor_memory_and_cpu_families_with_labels():
    m = Metrics(process_metrics=False)
    fams = families(m)
    assert fams["blockx_executor_memory_bytes"] == "gauge"
    assert fams["blockx_executor_cpu_seconds"] == "counter"
    assert not [k for k in samples(m) if k[0].startswith("blockx_executor_memory")]  # no executor, no series
    usage = [("exec-0", 50_000_000, 1_500, 250), ("exec-1", 70_000_000, 20, 5)]
    m.executor_usage_fn = lambda: usage
    s = samples(m)
    assert s[("blockx_executor_memory_bytes", (("executor", "exec-0"),))] == 50_000_000
    assert s[("blockx_executor_memory_bytes", (("executor", "exec-1"),))] == 70_000_000
    assert s[("blockx_executor_cpu_seconds_total", (("executor", "exec-0"), ("mode", "user")))] == 1.5
    assert s[("blockx_executor_cpu_seconds_total", (("executor", "exec-0"), ("mode", "system")))] == 0.25
    assert s[("blockx_executor_cpu_seconds_total", (("executor", "exec-1"), ("mode", "user")))] == 0.02
    assert s[("blockx_executor_cpu_seconds_total", (("executor", "exec-1"), ("mode", "system")))] == 0.005
    # exec-1 is removed (or lost): its series disappear at the next scrape.
    usage[:] = usage[:1]
    s = samples(m)
    assert not [k for k in s if dict(k[1]).get("executor") == "exec-1"]
    assert s[("blockx_executor_memory_bytes", (("executor", "exec-0"),))] == 50_000_000


def test_a_failing_executor_usage_callback_drops_only_its_samples():
    m = Metrics(process_metrics=False)
    m.executor_usage_fn = lambda: 1 // 0
    m.calls_dispatched = 3
    s = samples(m)
    assert not [k for k in s if k[0].startswith("blockx_executor_cpu")]
    assert s[("blockx_calls_dispatched_total", ())] == 3


def test_worker_ready_and_draining_gauges():
    m = Metrics(process_metrics=False)
    s = samples(m)      # not wired yet: not ready, not draining
    assert s[("blockx_worker_ready", ())] == 0 and s[("blockx_worker_draining", ())] == 0
    flags = {"ready": True, "draining": False}
    m.worker_ready_fn = lambda: flags["ready"]
    m.worker_draining_fn = lambda: flags["draining"]
    assert samples(m)[("blockx_worker_ready", ())] == 1
    flags["draining"] = True
    s = samples(m)
    assert s[("blockx_worker_draining", ())] == 1 and s[("blockx_worker_ready", ())] == 1
