import json
import os
from dataclasses import replace

import pytest

from blockx.app import config as config_mod
from blockx.app.config import (ConfigError, WorkerFullConfig, apply_env, apply_json, env_vars, load_config,
                               split_host_port)
from blockx.app.profile import BLOCK, BUNDLE, Profile, get_profile
from blockx.core.config import Config
from blockx.core.dispatch.config import DispatcherConfig

SPEC_ENV_VARS = {
    "WORKER_LISTEN": "listenAddr",
    "WORKER_ADDR": "workerAddr",
    "ETCD_ENDPOINTS": "etcdEndpoints",
    "WORKER_REGISTRY_PREFIX": "workerRegistryPrefix",
    "EXECUTOR_COUNT": "executorCount",
    "TASK_SLOTS": "worker.taskSlots",
    "TASK_DEADLINE_MS": "worker.taskDeadlineMs",
    "MAX_TASK_TIMEOUT_MS": "worker.maxTaskTimeoutMs",
    "RESULT_RETENTION_MS": "worker.resultRetentionMs",
    "WATCH_DISCONNECT_GRACE_MS": "worker.watchDisconnectGraceMs",
    "CALL_RETRY_MAX_ATTEMPTS": "worker.defaultMaxAttempts",
    "CALL_RETRY_BASE_BACKOFF_MS": "worker.defaultBaseBackoffMs",
    "CALL_RETRY_JITTER_PERCENT": "worker.defaultRetryJitterPercent",
    "EXECUTOR_TASK_SLOTS": "admission.executorTaskSlots",
    "SCAN_SLOTS": "admission.scanSlots",
    "STREAM_BUILD_ENABLED": "streamBuild.enabled",
    "WRITER_STREAM_ENABLED": "writerStream.enabled",
    "WRITER_STREAM_KEEP_OUTPUTS": "writerStream.keepOutputs",
    "WORKER_HEARTBEAT_INTERVAL": "heartbeatIntervalMs",
    "DRAIN_TIMEOUT_MS": "drainTimeoutMs",
    "PHASE_IO_TIMEOUT_MS": "phaseIoTimeoutMs",
    "SUBMIT_LINGER_MS": "submitLingerMs",
    "WORKER_GRPC_KEEPALIVE_TIME_MS": "grpcKeepaliveTimeMs",
    "WORKER_GRPC_KEEPALIVE_TIMEOUT_MS": "grpcKeepaliveTimeoutMs",
    "EXECUTOR_RESTART_ENABLED": "executorRestartEnabled",
    "FUNCTION_SNAPSHOT_RETENTION_MS": "functionSnapshotRetentionMs",
    "EXECUTOR_SPAWN_MODE": "executorSpawnMode",
    "EXECUTOR_SANDBOX_RUNTIME": "executorSandboxRuntime",
    "EXECUTOR_CPU_MILLICORES": "executorCpuMillicores",
    "EXECUTOR_PYTHON": "executorPython",
    "EXECUTOR_SITE_PACKAGES": "executorSitePackages",
    "EXECUTOR_SELECTION_SAMPLE_SIZE": "dispatcher.executorSelectionSampleSize",
    "CALL_DEADLINE_MS": "dispatcher.callDeadlineMs",
    "SCHEDULER_STALL_TIMEOUT_MS": "dispatcher.schedulerStallTimeoutMs",
    "DISPATCH_INSTANCE_FAIRNESS": "dispatcher.instanceFairness",
    "DISPATCH_INSTANCE_FAIRNESS_QUANTUM": "dispatcher.instanceFairnessQuantum",
    "MAX_COLLECTED_OUTPUT_BYTES": "dispatcher.maxCollectedOutputBytes",
    # this build's extras
    "FUNCTIONS_DIR": "functionsDir",
    "FUNCTIONS_SOURCE": "functionsSource",
    "FUNCTIONS_ETCD_PREFIX": "functionsEtcdPrefix",
    "FUNCTIONS_REDIS_URL": "functionsRedisUrl",
    "FUNCTIONS_REDIS_PREFIX": "functionsRedisPrefix",
    "FUNCTIONS_REDIS_CHECK_INTERVAL_MS": "functionsRedisCheckIntervalMs",
    "EXECUTOR_SOCKET_PATH": "socketPath",
    "METRICS_LISTEN": "metricsListen",
    "DASHBOARD_LISTEN": "dashboardListen",
    "SHADOW_SUBMIT_TARGET_ADDR": "shadowSubmitTargetAddr",
    "SHADOW_SUBMIT_SAMPLE_RATE": "shadowSubmitSampleRate",
    "IO_DEVSTUB_CONCURRENCY": "ioBackends.devstub.concurrency",
    "IO_DEVSTUB_ENABLED": "ioBackends.devstub.enabled",
    "SQL_IO_TIMEOUT_MS": "ioBackends.sql.timeoutMs",
    "SQL_IO_MAX_ROWS": "ioBackends.sql.maxRows",
    "SQL_IO_MAX_RESULT_BYTES": "ioBackends.sql.maxResultBytes",
    "RPC_ENDPOINTS": "ioBackends.rpc.endpoints",
    "RPC_IO_TIMEOUT_MS": "ioBackends.rpc.timeoutMs",
    "RPC_IO_MAX_QUEUE": "ioBackends.rpc.maxQueue",
    "RPC_IO_MAX_RESPONSE_BYTES": "ioBackends.rpc.maxResponseBytes",
    "SCAN_MAX_ROW_BYTES": "dataPlane.scanMaxRowBytes",
    "BUNDLE_MAX_FILES": "dataPlane.bundleMaxFiles",
    "BLOCKX_DATA_SOURCES": "dataSources",
    "STATE_DIR": "dataPlane.stateDir",
    "BUNDLE_ROOT": "dataPlane.bundleRoot",
    "LOG_LEVEL": "logLevel",
    "SESSION_MAX_PENDING_EVENTS": "sessionMaxPendingEvents",
    "SESSION_MAX_PENDING_BYTES": "sessionMaxPendingBytes",
    "MAX_SLOT_TTL_MS": "worker.maxSlotTtlMs",
    "MAX_PAYLOAD_BYTES": "worker.maxPayloadBytes",
    "MAX_RESULT_HANDLER_CONFIG_BYTES": "worker.maxResultHandlerConfigBytes",
    "MAX_INSTANCE_ID_BYTES": "worker.maxInstanceIdBytes",
    "WORKER_GRPC_MAX_MESSAGE_BYTES": "grpcMaxMessageBytes",
    "WORKER_GRPC_MAX_CONCURRENT_STREAMS": "grpcMaxConcurrentStreams",
    "WORKER_GRPC_MAX_CONCURRENT_RPCS": "grpcMaxConcurrentRpcs",
    "WORKER_GRPC_MAX_CONNECTIONS": "grpcMaxConnections",
    "MAX_TASK_SESSIONS": "maxTaskSessions",
    "MAX_WATCH_STREAMS": "maxWatchStreams",
    "WATCH_MAX_PENDING_UPDATES": "watchMaxPendingUpdates",
    "RESULT_PAGE_BYTES": "resultPageBytes",              # results in pages
    # isolation and trust
    "EXECUTOR_BUDGET_PREEMPT_MS": "executorBudgetPreemptMs",
    "EXECUTOR_CALL_BATCH": "executorCallBatch",
    "WORKER_TLS_CERT": "tlsCert", "WORKER_TLS_KEY": "tlsKey", "WORKER_TLS_CLIENT_CA": "tlsClientCa",
    "ETCD_CA_CERT": "etcdCaCert", "ETCD_CERT": "etcdCert", "ETCD_KEY": "etcdKey",
    "ETCD_SERVER_NAME": "etcdServerName", "ETCD_USER": "etcdUser", "ETCD_PASSWORD": "etcdPassword",
    "ETCD_PASSWORD_FILE": "etcdPasswordFile",
    "SHADOW_TLS_CA": "shadowTlsCa", "SHADOW_TLS_CERT": "shadowTlsCert", "SHADOW_TLS_KEY": "shadowTlsKey",
    "EXECUTOR_MEMORY_LIMIT_MB": "executorMemoryLimitMb", "EXECUTOR_MAX_PROCESSES": "executorMaxProcesses",
    "EXECUTOR_MAX_OPEN_FILES": "executorMaxOpenFiles",
    "EXECUTOR_USER": "executorUser",
    "EXECUTOR_OUTPUT_LINE_BYTES": "executorOutputLineBytes",
    "EXECUTOR_OUTPUT_BYTES_PER_S": "executorOutputBytesPerS",
    "AUDIT_MODE": "auditMode", "AUDIT_ALLOWLIST_FILE": "auditAllowlistFile",
    "AUDIT_ALLOWLIST_ETCD_PREFIX": "auditAllowlistEtcdPrefix",
    "WORKER_AUTH_MODE": "authMode", "WORKER_AUTH_TOKENS_FILE": "authTokensFile",
    "WORKER_AUTH_MTLS_ADMINS": "authMtlsAdmins",
    # fair shares and the memory budget
    "MAX_SLOTS_PER_IDENTITY": "worker.maxSlotsPerIdentity",
    "MAX_QUEUED_CALL_BYTES_PER_IDENTITY": "worker.maxQueuedCallBytesPerIdentity",
    "MAX_TASK_SESSIONS_PER_IDENTITY": "maxTaskSessionsPerIdentity",
    "MAX_WATCH_STREAMS_PER_IDENTITY": "maxWatchStreamsPerIdentity",
    "WORKER_MEMORY_BUDGET_BYTES": "memoryBudgetBytes",
    "SHADOW_SUBMIT_TOKEN_FILE": "shadowSubmitTokenFile",
    # task traces
    "TRACE_ENABLED": "traceEnabled", "TRACE_MAX_EVENTS_PER_TASK": "traceMaxEventsPerTask",
    "TRACE_RETAINED_MAX_EVENTS": "traceRetainedMaxEvents",
    "BLOCKX_OTEL_CALL_SPAN_RATE": "otelCallSpanRate",       # OpenTelemetry call spans
}


def get_path(cfg, path):
    d = cfg.to_dict()
    for part in path.split("."):
        d = d[part]
    return d


def load(env=None, profile=BLOCK, **kw):
    return load_config(profile, env=env or {}, **kw)


# --- defaults ---------------------------------------------------------------------------


def test_defaults_match_the_spec_tables():
    cfg = load()
    d = cfg.to_dict()
    assert d["listenAddr"] == ":8081"
    assert d["workerAddr"] == ""
    assert d["etcdEndpoints"] == ["localhost:2379"]
    assert d["workerRegistryPrefix"] == "/blockx/workers/"
    assert d["executorCount"] == 8
    assert d["executorSpawnMode"] == "process"
    assert d["worker"] == {
        "taskSlots": 50, "defaultTTLMs": 5000, "taskDeadlineMs": 300000, "maxTaskTimeoutMs": 28800000,
        "resultRetentionMs": 300000, "watchDisconnectGraceMs": 0, "defaultMaxAttempts": 3,
        "defaultBaseBackoffMs": 10, "defaultRetryJitterPercent": 5,
        "maxSlotTtlMs": 600000, "maxPayloadBytes": 16 * 1024 * 1024,
        "maxResultHandlerConfigBytes": 1024 * 1024, "maxInstanceIdBytes": 256,
        "maxSlotsPerIdentity": 0, "maxQueuedCallBytesPerIdentity": 64 * 1024 * 1024,
    }
    assert (d["maxTaskSessionsPerIdentity"], d["maxWatchStreamsPerIdentity"], d["memoryBudgetBytes"],
            d["authMtlsAdmins"]) == (16, 256, 0, "")
    assert (d["grpcMaxMessageBytes"], d["grpcMaxConcurrentStreams"], d["grpcMaxConcurrentRpcs"],
            d["grpcMaxConnections"], d["maxTaskSessions"], d["maxWatchStreams"],
            d["watchMaxPendingUpdates"]) == (64 * 1024 * 1024, 1000, 10000, 1000, 1000, 1000, 65536)
    assert d["admission"] == {"builderSlots": 16, "executorTaskSlots": 32, "pluginSlots": 16, "scanSlots": 8}
    assert d["streamBuild"] == {"enabled": False, "maxOutstandingBatches": 2, "batchMaxRows": 8192,
                                "batchMaxArgsBytes": 32 * 1024 * 1024}
    assert d["dispatcher"] == {
        "executorMaxInflight": 128, "executorMaxRunnable": 128, "executorSelectionSampleSize": 0,
        "executorMemoryHighWatermark": 0, "taskMaxInflightCalls": 1024, "callDeadlineMs": 5000,
        "schedulerStallTimeoutMs": 0, "maxSubcallDepth": 8, "baseBackoffMs": 10, "maxBackoffMs": 60000,
        "instanceFairness": False, "instanceFairnessQuantum": 0, "maxCollectedOutputBytes": 0,
    }
    assert d["heartbeatIntervalMs"] == 200
    assert d["drainTimeoutMs"] == 30000
    assert d["phaseIoTimeoutMs"] == 10000
    assert (d["grpcKeepaliveTimeMs"], d["grpcKeepaliveTimeoutMs"]) == (30000, 10000)
    assert d["executorRestartEnabled"] is True
    assert (d["executorRestartDelayMs"], d["executorMaxRestarts"], d["executorRestartWindowMs"],
            d["executorBackoffMs"], d["executorHeartbeatTimeoutMs"]) == (1000, 10, 60000, 30000, 10000)
    assert d["functionSnapshotRetentionMs"] == 0
    assert d["functionsDir"] == ""           # no function until one is configured (dev: the examples)
    assert d["metricsListen"] == "127.0.0.1:9464"
    assert (d["shadowSubmitTargetAddr"], d["shadowSubmitSampleRate"]) == ("", 0.0)
    assert d["ioBackends"] == {"devstub": {"enabled": False, "concurrency": 64, "timeoutMs": 0},
                               "sql": {"enabled": True, "concurrency": 8, "timeoutMs": 5000, "maxRows": 10000,
                                       "maxResultBytes": 8 * 1024 * 1024},
                               "rpc": {"endpoints": {}, "timeoutMs": 5000, "concurrency": 16, "maxQueue": 1024,
                                       "maxBatch": 100, "maxResponseBytes": 8 * 1024 * 1024, "retries": 2,
                                       "retryBackoffMs": 50}}
    assert d["dataSources"] == {}
    assert d["dataPlane"]["bundleRoot"] == "" and d["dataPlane"]["scanFetchRows"] == 1000
    assert (d["dataPlane"]["scanMaxRowBytes"], d["dataPlane"]["bundleMaxFiles"]) == (4 * 1024 * 1024, 100_000)
    assert d["logLevel"] == "INFO"
    assert cfg.violations() == []


def test_default_socket_path_is_per_process_in_a_per_user_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    path = config_mod.default_socket_path()
    assert path == os.path.join(str(tmp_path), f"blockx-{os.getuid()}", f"worker-{os.getpid()}.sock")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "missing"))
    assert not config_mod.default_socket_path().startswith(str(tmp_path))


def test_bundle_profile_defaults():
    cfg = load(profile=BUNDLE)
    assert cfg.worker_registry_prefix == "/blockx/bundle-workers/"
    assert cfg.stream_build.enabled is True
    assert cfg.violations() == []


def test_derived_values():
    cfg = load()
    assert cfg.etcd_enabled
    assert cfg.effective_function_snapshot_retention_ms() == 28_800_000 + 10_000
    cfg.function_snapshot_retention_ms = 30_000_000
    assert cfg.effective_function_snapshot_retention_ms() == 30_000_000
    assert cfg.effective_scheduler_stall_timeout_ms() == 10_000
    assert cfg.effective_executor_heartbeat_timeout_ms() == 15_000
    cfg.dispatcher.scheduler_stall_timeout_ms = 5_500  # <= deadline + 1s: raised
    assert cfg.effective_scheduler_stall_timeout_ms() == 10_000
    cfg.dispatcher.scheduler_stall_timeout_ms = 20_000
    assert cfg.effective_scheduler_stall_timeout_ms() == 20_000
    cfg.dispatcher.call_deadline_ms = 0
    cfg.dispatcher.scheduler_stall_timeout_ms = 0
    # An unlimited budget still arms the backstop: it derives 0 + 5000 ms.
    assert cfg.effective_scheduler_stall_timeout_ms() == 5_000
    assert cfg.effective_executor_heartbeat_timeout_ms() == 10_000
    assert cfg.log_level_number() == 20
    cfg.log_level = "warn"
    assert cfg.log_level_number() == 30


def test_core_config_conversions_carry_every_value():
    cfg = load({"TASK_SLOTS": "7", "CALL_DEADLINE_MS": "2000", "SCAN_SLOTS": "3",
                "FUNCTION_SNAPSHOT_RETENTION_MS": "30000000"})
    core = cfg.core_config().validate()
    assert core.task_slots == 7 and core.function_snapshot_retention_ms == 30_000_000
    assert core.default_ttl_ms == 5000
    adm = cfg.admission_config().validate()
    assert (adm.builder_slots, adm.executor_task_slots, adm.plugin_slots, adm.scan_slots) == (16, 32, 16, 3)
    dc = cfg.dispatcher_config().validate()
    assert dc.call_deadline_ms == 2000
    assert dc.scheduler_stall_timeout_ms == 7000  # derived before handing it over
    assert dc.batch_max_rows == 8192 and dc.max_outstanding_batches == 2
    assert dc.default_max_attempts == 3 and dc.max_backoff_ms == 60_000


# --- environment ------------------------------------------------------------------------


def test_every_spec_env_var_is_known_and_maps_to_its_field():
    assert env_vars() == SPEC_ENV_VARS


ENV_CASES = [
    ("WORKER_LISTEN", "127.0.0.1:9000", "127.0.0.1:9000"),
    ("WORKER_ADDR", "10.0.0.5:8081", "10.0.0.5:8081"),
    ("ETCD_ENDPOINTS", "a:2379, b:2379", ["a:2379", "b:2379"]),
    ("ETCD_ENDPOINTS", "none", []),
    ("ETCD_ENDPOINTS", "", []),
    ("WORKER_REGISTRY_PREFIX", "/staging/workers/", "/staging/workers/"),
    ("EXECUTOR_COUNT", "3", 3),
    ("TASK_SLOTS", "12", 12),
    ("TASK_DEADLINE_MS", "1000", 1000),
    ("MAX_TASK_TIMEOUT_MS", "2000000", 2000000),
    ("RESULT_RETENTION_MS", "0", 0),
    ("WATCH_DISCONNECT_GRACE_MS", "1500", 1500),
    ("CALL_RETRY_MAX_ATTEMPTS", "5", 5),
    ("CALL_RETRY_BASE_BACKOFF_MS", "25", 25),
    ("CALL_RETRY_JITTER_PERCENT", "0", 0),
    ("EXECUTOR_TASK_SLOTS", "4", 4),
    ("SCAN_SLOTS", "2", 2),
    ("STREAM_BUILD_ENABLED", "true", True),
    ("STREAM_BUILD_ENABLED", "1", True),
    ("WORKER_HEARTBEAT_INTERVAL", "2s", 2000),
    ("WORKER_HEARTBEAT_INTERVAL", "1m30s", 90000),
    ("WORKER_HEARTBEAT_INTERVAL", "1500ms", 1500),
    ("DRAIN_TIMEOUT_MS", "500", 500),
    ("SUBMIT_LINGER_MS", "4", 4),
    ("PHASE_IO_TIMEOUT_MS", "700", 700),
    ("WORKER_GRPC_KEEPALIVE_TIME_MS", "11000", 11000),
    ("WORKER_GRPC_KEEPALIVE_TIMEOUT_MS", "3000", 3000),
    ("EXECUTOR_RESTART_ENABLED", "false", False),
    ("EXECUTOR_RESTART_ENABLED", "OFF", False),
    ("FUNCTION_SNAPSHOT_RETENTION_MS", "99999999", 99999999),
    ("EXECUTOR_SPAWN_MODE", "sandbox", "sandbox"),
    ("EXECUTOR_SELECTION_SAMPLE_SIZE", "2", 2),
    ("CALL_DEADLINE_MS", "0", 0),
    ("SCHEDULER_STALL_TIMEOUT_MS", "12000", 12000),
    ("DISPATCH_INSTANCE_FAIRNESS", "yes", True),
    ("DISPATCH_INSTANCE_FAIRNESS_QUANTUM", "16", 16),
    ("MAX_COLLECTED_OUTPUT_BYTES", "1048576", 1048576),
    ("FUNCTIONS_DIR", "/srv/functions", "/srv/functions"),
    ("FUNCTIONS_SOURCE", "etcd", "etcd"),
    ("FUNCTIONS_ETCD_PREFIX", "/prod/functions/", "/prod/functions/"),
    ("EXECUTOR_SOCKET_PATH", "/run/blockx/w.sock", "/run/blockx/w.sock"),
    ("METRICS_LISTEN", "", ""),
    ("DASHBOARD_LISTEN", "127.0.0.1:8090", "127.0.0.1:8090"),
    ("SHADOW_SUBMIT_TARGET_ADDR", "10.0.0.9:8081", "10.0.0.9:8081"),
    ("SHADOW_SUBMIT_SAMPLE_RATE", "0.25", 0.25),
    ("IO_DEVSTUB_CONCURRENCY", "3", 3),
    ("SQL_IO_TIMEOUT_MS", "250", 250),
    ("SQL_IO_MAX_ROWS", "5", 5),
    ("SQL_IO_MAX_RESULT_BYTES", "1000", 1000),
    ("SCAN_MAX_ROW_BYTES", "2048", 2048),
    ("BUNDLE_MAX_FILES", "10", 10),
    ("BLOCKX_DATA_SOURCES", '{"main": "postgresql://u@db:5432/app"}', {"main": "postgresql://u@db:5432/app"}),
    ("STATE_DIR", "/var/lib/blockx", "/var/lib/blockx"),
    ("BUNDLE_ROOT", "/srv/bundles", "/srv/bundles"),
    ("LOG_LEVEL", "debug", "debug"),
    ("TRACE_ENABLED", "false", False),
    ("TRACE_MAX_EVENTS_PER_TASK", "500", 500),
    ("TRACE_RETAINED_MAX_EVENTS", "100000", 100000),
    ("BLOCKX_OTEL_CALL_SPAN_RATE", "0.5", 0.5),
]


@pytest.mark.parametrize("name,value,expected", ENV_CASES, ids=[f"{c[0]}={c[1]}" for c in ENV_CASES])
def test_each_env_var_is_parsed(name, value, expected):
    default = get_path(load(), SPEC_ENV_VARS[name])
    assert default != expected, "the case must change the value to prove the variable is read"
    assert get_path(load({name: value}), SPEC_ENV_VARS[name]) == expected


@pytest.mark.parametrize("name,value,message", [
    ("TASK_SLOTS", "abc", "TASK_SLOTS (for worker.taskSlots): 'abc' is not an integer"),
    ("TASK_SLOTS", "1.5", "is not an integer"),
    ("TASK_SLOTS", "", "is not an integer"),
    ("EXECUTOR_COUNT", "99999999999999999999", "out of the 64-bit integer range"),
    ("STREAM_BUILD_ENABLED", "maybe", "STREAM_BUILD_ENABLED (for streamBuild.enabled): 'maybe' is not a boolean"),
    ("SHADOW_SUBMIT_SAMPLE_RATE", "half", "'half' is not a number"),
    ("SHADOW_SUBMIT_SAMPLE_RATE", "nan", "not a finite number"),
    ("WORKER_HEARTBEAT_INTERVAL", "200", "WORKER_HEARTBEAT_INTERVAL (for heartbeatIntervalMs): '200' is not a "
                                         'Go duration: missing unit (write e.g. "200ms" or "200s")'),
    ("WORKER_HEARTBEAT_INTERVAL", "2x", "unknown unit 'x'"),
])
def test_bad_env_values_name_the_variable(name, value, message):
    with pytest.raises(ConfigError) as ei:
        load({name: value})
    assert message in str(ei.value)


def test_bad_env_values_are_all_reported_at_once():
    with pytest.raises(ConfigError) as ei:
        load({"TASK_SLOTS": "x", "SCAN_SLOTS": "y", "LOG_LEVEL": "info"})
    assert len(ei.value.problems) == 2
    assert any("TASK_SLOTS" in p for p in ei.value.problems)
    assert any("SCAN_SLOTS" in p for p in ei.value.problems)


def test_unrelated_env_vars_are_ignored():
    assert load({"HOME": "/x", "TASK_SLOTS_EXTRA": "q"}).to_dict() == load().to_dict()


# --- file --------------------------------------------------------------------------------


def write(tmp_path, data, name="worker.json"):
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(p)


def test_file_overrides_only_the_fields_present(tmp_path):
    path = write(tmp_path, {"worker": {"taskSlots": 7}, "dispatcher": {"callDeadlineMs": 900},
                            "etcdEndpoints": ["e1:2379"], "shadowSubmitSampleRate": 1})
    cfg = load({"WORKER_CONFIG": path})
    base = load().to_dict()
    got = cfg.to_dict()
    assert got["worker"]["taskSlots"] == 7
    assert got["dispatcher"]["callDeadlineMs"] == 900
    assert got["etcdEndpoints"] == ["e1:2379"]
    assert got["shadowSubmitSampleRate"] == 1.0
    base["worker"]["taskSlots"] = 7
    base["dispatcher"]["callDeadlineMs"] = 900
    base["etcdEndpoints"] = ["e1:2379"]
    base["shadowSubmitSampleRate"] = 1.0
    assert got == base


def test_config_path_argument_takes_the_place_of_worker_config(tmp_path):
    a = write(tmp_path, {"executorCount": 2}, "a.json")
    b = write(tmp_path, {"executorCount": 3}, "b.json")
    assert load({"WORKER_CONFIG": a}).executor_count == 2
    assert load({"WORKER_CONFIG": a}, config_path=b).executor_count == 3


def test_load_order_defaults_profile_file_env(tmp_path):
    def tune(cfg):
        cfg.worker.task_slots = 11
        cfg.executor_count = 4
        cfg.admission.scan_slots = 5

    prof = replace(BLOCK, tune_defaults=tune)
    assert load(profile=prof).worker.task_slots == 11
    path = write(tmp_path, {"worker": {"taskSlots": 12}, "executorCount": 6})
    cfg = load({"WORKER_CONFIG": path}, profile=prof)
    assert (cfg.worker.task_slots, cfg.executor_count, cfg.admission.scan_slots) == (12, 6, 5)
    cfg = load({"WORKER_CONFIG": path, "TASK_SLOTS": "13"}, profile=prof)
    assert (cfg.worker.task_slots, cfg.executor_count) == (13, 6)


def test_file_and_env_can_roll_back_a_profile_default(tmp_path):
    path = write(tmp_path, {"streamBuild": {"enabled": False}})
    assert load({"WORKER_CONFIG": path}, profile=BUNDLE).stream_build.enabled is False
    assert load({"STREAM_BUILD_ENABLED": "false"}, profile=BUNDLE).stream_build.enabled is False


def test_file_can_move_the_registry_prefix_and_env_wins(tmp_path):
    path = write(tmp_path, {"workerRegistryPrefix": "/a/workers/"})
    assert load({"WORKER_CONFIG": path}).worker_registry_prefix == "/a/workers/"
    assert load({"WORKER_CONFIG": path, "WORKER_REGISTRY_PREFIX": "/b/workers/"}).worker_registry_prefix == \
        "/b/workers/"


@pytest.mark.parametrize("data,message", [
    ({"taskSlots": 3}, "unknown key 'taskSlots' (did you mean 'worker.taskSlots'?)"),
    ({"worker": {"scanSlots": 3}}, "unknown key 'worker.scanSlots' in 'worker' (did you mean 'admission.scanSlots'?)"),
    ({"worker": {"taskSlot": 3}}, "unknown key 'worker.taskSlot' in 'worker' (did you mean 'worker.taskSlots'?)"),
    ({"zzz": 1}, "unknown key 'zzz'"),
    ({"worker": {"taskSlots": "3"}}, "worker.taskSlots: expected an integer, got string"),
    ({"worker": {"taskSlots": 2.5}}, "worker.taskSlots: expected an integer, got number 2.5"),
    ({"worker": {"taskSlots": True}}, "worker.taskSlots: expected an integer, got boolean"),
    ({"worker": 5}, "worker: expected an object, got number"),
    ({"streamBuild": {"enabled": "yes"}}, "streamBuild.enabled: expected a boolean, got string"),
    ({"listenAddr": 8081}, "listenAddr: expected a string, got number"),
    ({"etcdEndpoints": [1]}, "etcdEndpoints: expected a list of strings, got array"),
    ({"shadowSubmitSampleRate": "0.5"}, "shadowSubmitSampleRate: expected a number, got string"),
    ({"executorCount": 2 ** 70}, "out of the 64-bit integer range"),
])
def test_bad_file_contents_are_clear_errors(tmp_path, data, message):
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as ei:
        load({"WORKER_CONFIG": path})
    assert message in str(ei.value)
    assert path in str(ei.value)


def test_every_file_problem_is_reported(tmp_path):
    path = write(tmp_path, {"nope": 1, "worker": {"taskSlots": "x", "alsoNope": 2}})
    with pytest.raises(ConfigError) as ei:
        load({"WORKER_CONFIG": path})
    assert len(ei.value.problems) == 3


@pytest.mark.parametrize("content,message", [
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "the top level must be a JSON object, got array"),
])
def test_malformed_file(tmp_path, content, message):
    path = write(tmp_path, content)
    with pytest.raises(ConfigError) as ei:
        load({"WORKER_CONFIG": path})
    assert message in str(ei.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot be read"):
        load({"WORKER_CONFIG": str(tmp_path / "absent.json")})


def test_empty_worker_config_means_no_file():
    assert load({"WORKER_CONFIG": ""}).to_dict() == load().to_dict()


def test_to_dict_round_trips_through_a_file(tmp_path):
    cfg = load({"TASK_SLOTS": "9", "ETCD_ENDPOINTS": "none", "LOG_LEVEL": "debug"})
    path = write(tmp_path, cfg.to_dict())
    again = load({"WORKER_CONFIG": path})
    assert again.to_dict() == cfg.to_dict()
    assert json.loads(cfg.to_json()) == cfg.to_dict()


def test_apply_json_and_env_directly():
    cfg = WorkerFullConfig()
    apply_json(cfg, {"etcdEndpoints": "a:1,b:2"})
    assert cfg.etcd_endpoints == ["a:1", "b:2"]
    apply_json(cfg, {"etcdEndpoints": ["none"]})
    assert cfg.etcd_endpoints == [] and not cfg.etcd_enabled
    apply_env(cfg, {"TASK_SLOTS": " 4 "})
    assert cfg.worker.task_slots == 4


# --- validation -----------------------------------------------------------------------------


def broken(**changes):
    """A loaded config with dotted-path attribute changes applied."""
    cfg = load()
    for path, value in changes.items():
        obj = cfg
        parts = path.split("__")
        for p in parts[:-1]:
            obj = getattr(obj, p)
        setattr(obj, parts[-1], value)
    return cfg


VIOLATIONS = [
    (dict(listen_addr="8081"), "listenAddr (WORKER_LISTEN) is not a valid address: '8081' is not host:port"),
    (dict(listen_addr=":99999"), "port 99999 is out of range"),
    (dict(worker_addr="host:0"), "workerAddr (WORKER_ADDR) must name a real port, not 0"),
    (dict(worker_addr="::1:80"), "an IPv6 host needs brackets"),
    (dict(etcd_endpoints=["a:1", "none"]), '"none" must be the only entry'),
    (dict(etcd_endpoints=["nohost"]), "'nohost' is not host:port"),
    (dict(worker_registry_prefix=""), "workerRegistryPrefix (WORKER_REGISTRY_PREFIX) must not be empty"),
    (dict(worker_registry_prefix="blockx/workers"), "must start and end with '/'"),
    (dict(worker_registry_prefix="/blockx/bundle-workers/"),
     "'/blockx/bundle-workers/' does not match deployment 'block': its last segment must be 'workers'"),
    (dict(executor_count=0), "executorCount (EXECUTOR_COUNT) must be > 0 (got 0)"),
    (dict(executor_spawn_mode="thread"), "executorSpawnMode (EXECUTOR_SPAWN_MODE) must be \"process\""),
    (dict(executor_sandbox_runtime="docker"),
     "executorSandboxRuntime (EXECUTOR_SANDBOX_RUNTIME) must be \"bwrap\" or \"oci\" (got 'docker')"),
    (dict(executor_python="python3"), "executorPython (EXECUTOR_PYTHON) must be an absolute path"),
    (dict(executor_python="/nonexistent/bin/python"), "executorPython (EXECUTOR_PYTHON): cannot run"),
    (dict(executor_site_packages=["/nonexistent/site"]),
     "executorSitePackages (EXECUTOR_SITE_PACKAGES): '/nonexistent/site' is not an absolute path to a directory"),
    (dict(executor_cpu_millicores=-1), "executorCpuMillicores (EXECUTOR_CPU_MILLICORES) must be 0 (no limit)"),
    (dict(executor_cpu_millicores=500),
     "executorCpuMillicores (EXECUTOR_CPU_MILLICORES) is a limit of the oci sandbox runtime"),
    (dict(worker__task_slots=0), "worker.taskSlots (TASK_SLOTS) must be > 0 (got 0)"),
    (dict(worker__default_ttl_ms=0), "worker.defaultTTLMs must be > 0"),
    (dict(worker__task_deadline_ms=0), "worker.taskDeadlineMs (TASK_DEADLINE_MS) must be > 0"),
    (dict(worker__max_task_timeout_ms=0), "worker.maxTaskTimeoutMs (MAX_TASK_TIMEOUT_MS) must be > 0"),
    (dict(worker__task_deadline_ms=30_000_000),
     "worker.taskDeadlineMs (TASK_DEADLINE_MS) (30000000) must not exceed worker.maxTaskTimeoutMs"),
    (dict(worker__result_retention_ms=-1), "worker.resultRetentionMs (RESULT_RETENTION_MS) must be >= 0"),
    (dict(worker__watch_disconnect_grace_ms=-1), "worker.watchDisconnectGraceMs"),
    (dict(worker__default_max_attempts=0), "worker.defaultMaxAttempts (CALL_RETRY_MAX_ATTEMPTS) must be >= 1"),
    (dict(worker__default_base_backoff_ms=-5), "worker.defaultBaseBackoffMs"),
    (dict(worker__default_retry_jitter_percent=6),
     "worker.defaultRetryJitterPercent (CALL_RETRY_JITTER_PERCENT) must be between 0 and 5 (got 6)"),
    (dict(worker__default_retry_jitter_percent=-1), "must be between 0 and 5 (got -1)"),
    (dict(admission__builder_slots=0), "admission.builderSlots must be > 0"),
    (dict(admission__executor_task_slots=0), "admission.executorTaskSlots (EXECUTOR_TASK_SLOTS) must be > 0"),
    (dict(admission__plugin_slots=0), "admission.pluginSlots must be > 0"),
    (dict(admission__scan_slots=0), "admission.scanSlots (SCAN_SLOTS) must be > 0"),
    (dict(stream_build__max_outstanding_batches=0), "streamBuild.maxOutstandingBatches must be > 0"),
    (dict(stream_build__batch_max_rows=0), "streamBuild.batchMaxRows must be > 0"),
    (dict(stream_build__batch_max_args_bytes=0), "streamBuild.batchMaxArgsBytes must be > 0"),
    (dict(dispatcher__executor_max_inflight=0), "dispatcher.executorMaxInflight must be > 0"),
    (dict(dispatcher__executor_max_inflight=257),
     "dispatcher.executorMaxInflight (257) must not exceed the executor outbox depth (256 frames): it is how "
     "many calls one executor may be sent at once; set it to at most 256"),
    (dict(dispatcher__executor_max_runnable=-1), "dispatcher.executorMaxRunnable must be >= 0"),
    (dict(dispatcher__executor_selection_sample_size=-1), "dispatcher.executorSelectionSampleSize"),
    (dict(dispatcher__executor_memory_high_watermark=-1), "dispatcher.executorMemoryHighWatermark"),
    (dict(dispatcher__task_max_inflight_calls=0), "dispatcher.taskMaxInflightCalls must be > 0"),
    (dict(dispatcher__call_deadline_ms=-1), "dispatcher.callDeadlineMs (CALL_DEADLINE_MS) must be >= 0"),
    (dict(dispatcher__scheduler_stall_timeout_ms=-1), "dispatcher.schedulerStallTimeoutMs"),
    (dict(dispatcher__max_subcall_depth=-1), "dispatcher.maxSubcallDepth must be >= 0"),
    (dict(dispatcher__base_backoff_ms=-1), "dispatcher.baseBackoffMs must be >= 0"),
    (dict(dispatcher__max_backoff_ms=-1), "dispatcher.maxBackoffMs must be >= 0"),
    (dict(dispatcher__instance_fairness_quantum=-1),
     "dispatcher.instanceFairnessQuantum (DISPATCH_INSTANCE_FAIRNESS_QUANTUM) must be >= 0"),
    (dict(dispatcher__max_collected_output_bytes=-1), "dispatcher.maxCollectedOutputBytes"),
    (dict(heartbeat_interval_ms=0), "heartbeatIntervalMs (WORKER_HEARTBEAT_INTERVAL) must be > 0"),
    (dict(heartbeat_interval_ms=10_000), "must be below the 10 s etcd lease TTL"),
    (dict(drain_timeout_ms=-1), "drainTimeoutMs (DRAIN_TIMEOUT_MS) must be >= 0"),
    (dict(phase_io_timeout_ms=0), "phaseIoTimeoutMs (PHASE_IO_TIMEOUT_MS) must be > 0"),
    (dict(submit_linger_ms=-1), "submitLingerMs (SUBMIT_LINGER_MS) must be"),
    (dict(submit_linger_ms=1001), "submitLingerMs (SUBMIT_LINGER_MS) must be"),
    (dict(grpc_keepalive_time_ms=0), "grpcKeepaliveTimeMs (WORKER_GRPC_KEEPALIVE_TIME_MS) must be > 0"),
    (dict(grpc_keepalive_timeout_ms=0), "grpcKeepaliveTimeoutMs (WORKER_GRPC_KEEPALIVE_TIMEOUT_MS) must be > 0"),
    (dict(executor_restart_delay_ms=-1), "executorRestartDelayMs must be >= 0"),
    (dict(executor_max_restarts=-1), "executorMaxRestarts must be >= 0"),
    (dict(executor_restart_window_ms=0), "executorRestartWindowMs must be > 0"),
    (dict(executor_backoff_ms=-1), "executorBackoffMs must be >= 0"),
    (dict(executor_heartbeat_timeout_ms=0), "executorHeartbeatTimeoutMs must be > 0"),
    (dict(trace_max_events_per_task=99),
     "traceMaxEventsPerTask (TRACE_MAX_EVENTS_PER_TASK) must be >= 100 (events kept per task trace) (got 99)"),
    (dict(trace_retained_max_events=31),
     "traceRetainedMaxEvents (TRACE_RETAINED_MAX_EVENTS) must be >= 32 (one ended trace) (got 31)"),
    (dict(otel_call_span_rate=1.5), "otelCallSpanRate (BLOCKX_OTEL_CALL_SPAN_RATE) must be between 0 and 1 (got 1.5)"),
    (dict(function_snapshot_retention_ms=1000),
     "functionSnapshotRetentionMs (FUNCTION_SNAPSHOT_RETENTION_MS) (1000) must be 0 (= maxTaskTimeoutMs + 10s) "
     "or >= worker.maxTaskTimeoutMs"),
    (dict(functions_dir="/nonexistent/dir"), "functionsDir (FUNCTIONS_DIR) '/nonexistent/dir' is not a directory"),
    (dict(functions_source="git"), "functionsSource (FUNCTIONS_SOURCE) must be one of dir, etcd, redis (got 'git')"),
    (dict(functions_source="redis", functions_redis_url="http://127.0.0.1:6379"),
     "functionsRedisUrl (FUNCTIONS_REDIS_URL) must be redis://host:port/db, rediss://host:port/db or unix:///path "
     "(got 'http://127.0.0.1:6379')"),
    (dict(functions_source="redis", functions_redis_url="redis://:s3cret@127.0.0.1:notaport/0"),
     "functionsRedisUrl (FUNCTIONS_REDIS_URL) 'redis://:***@127.0.0.1:notaport/0' is not a URL"),
    (dict(functions_source="redis", functions_redis_prefix=""),
     "functionsRedisPrefix (FUNCTIONS_REDIS_PREFIX): functions Redis prefix '' must be non-empty"),
    (dict(functions_source="redis", functions_redis_check_interval_ms=5),
     "functionsRedisCheckIntervalMs (FUNCTIONS_REDIS_CHECK_INTERVAL_MS) must be between 10 and 3600000 (got 5)"),
    (dict(functions_source="etcd", etcd_endpoints=[]),
     "functionsSource (FUNCTIONS_SOURCE) is etcd but etcdEndpoints (ETCD_ENDPOINTS) is \"none\""),
    (dict(functions_etcd_prefix="blockx/functions"),
     "functionsEtcdPrefix (FUNCTIONS_ETCD_PREFIX) must start and end with '/' (got 'blockx/functions')"),
    (dict(socket_path=""), "socketPath (EXECUTOR_SOCKET_PATH) must not be empty"),
    (dict(socket_path="/tmp/" + "x" * 120), "longer than the 107-byte Unix socket path limit"),
    (dict(metrics_listen="nowhere"), "metricsListen (METRICS_LISTEN) is not a valid address"),
    (dict(dashboard_listen="nowhere"), "dashboardListen (DASHBOARD_LISTEN) is not a valid address"),
    (dict(shadow_submit_sample_rate=1.5),
     "shadowSubmitSampleRate (SHADOW_SUBMIT_SAMPLE_RATE) must be between 0 and 1 (got 1.5)"),
    (dict(shadow_submit_sample_rate=0.5), "but shadowSubmitTargetAddr (SHADOW_SUBMIT_TARGET_ADDR) is empty"),
    (dict(shadow_submit_target_addr="bad"), "shadowSubmitTargetAddr (SHADOW_SUBMIT_TARGET_ADDR) is not a valid"),
    (dict(shadow_submit_target_addr="10.0.0.1:8081", worker_addr="10.0.0.1:8081"), "shadow traffic would loop"),
    (dict(io_backends__devstub__concurrency=0),
     "ioBackends.devstub.concurrency (IO_DEVSTUB_CONCURRENCY) must be > 0"),
    (dict(log_level="loud"), "logLevel (LOG_LEVEL) must be one of debug, info, warning, error, critical"),
]


@pytest.mark.parametrize("changes,message", VIOLATIONS, ids=[next(iter(c)) for c, _ in VIOLATIONS])
def test_each_violation_has_a_clear_message(changes, message):
    cfg = broken(**changes)
    problems = cfg.violations()
    assert any(message in p for p in problems), problems
    with pytest.raises(ConfigError) as ei:
        cfg.validate()
    assert message in str(ei.value)


def test_validate_collects_every_violation():
    cfg = broken(worker__task_slots=0, executor_count=0, log_level="x")
    with pytest.raises(ConfigError) as ei:
        cfg.validate()
    assert len(ei.value.problems) == 3
    assert "(3 problems)" in str(ei.value)


def test_valid_edge_values_pass():
    cfg = broken(worker__default_retry_jitter_percent=0, function_snapshot_retention_ms=28_800_000,
                 metrics_listen="", etcd_endpoints=[], heartbeat_interval_ms=60_000,
                 dispatcher__instance_fairness_quantum=1024, listen_addr="[::1]:0",
                 dispatcher__executor_max_inflight=256,
                 shadow_submit_target_addr="10.1.1.1:8081", shadow_submit_sample_rate=1.0,
                 worker_registry_prefix="/staging/blockx/workers/")
    assert cfg.violations() == []


def test_a_fairness_quantum_above_1024_is_capped_not_refused():
    cfg = broken(dispatcher__instance_fairness_quantum=5000)
    assert cfg.violations() == []
    assert cfg.dispatcher_config().effective_fairness_quantum == 1024


def test_registry_prefix_is_checked_against_the_deployment_of_the_profile():
    cfg = load(profile=BUNDLE)
    cfg.worker_registry_prefix = "/blockx/workers/"
    assert any("does not match deployment 'bundle'" in p for p in cfg.violations())
    # a config loaded for one profile can be checked against another explicitly
    assert not any("does not match" in p for p in cfg.violations(BLOCK))


def test_profile_without_registry_rules_only_checks_the_prefix_shape():
    cfg = WorkerFullConfig()
    cfg.worker_registry_prefix = "/x/"
    assert not any("registry" in p.lower() for p in cfg.violations())


# --- addresses and the socket directory ---------------------------------------------------


@pytest.mark.parametrize("addr,expected", [(":8081", ("", 8081)), ("0.0.0.0:1", ("0.0.0.0", 1)),
                                           ("[::]:80", ("::", 80)), ("host.example:65535", ("host.example", 65535))])
def test_split_host_port(addr, expected):
    assert split_host_port(addr) == expected


@pytest.mark.parametrize("addr", ["8081", "host:", "host:x", "[::1]80", "a b:1", ":-1"])
def test_split_host_port_rejects(addr):
    with pytest.raises(ValueError):
        split_host_port(addr)


def test_grpc_listen_and_worker_addr():
    cfg = load()
    assert cfg.grpc_listen_addr() == "[::]:8081"
    cfg.listen_addr = "127.0.0.1:9000"
    assert cfg.grpc_listen_addr() == "127.0.0.1:9000"
    assert cfg.resolved_worker_addr() == "127.0.0.1:9000"
    assert cfg.resolved_worker_addr(bound_port=9100) == "127.0.0.1:9100"
    cfg.listen_addr = ":8081"
    host, port = split_host_port(cfg.resolved_worker_addr())
    assert host and host not in ("0.0.0.0", "::") and port == 8081
    cfg.worker_addr = "w1:7000"
    assert cfg.resolved_worker_addr() == "w1:7000"


def test_config_loaded_for_a_custom_profile_records_its_deployment():
    prof = Profile(deployment="bundle", service="s", worker_registry_prefix="/x/bundle-workers/",
                   builders=("callList",), plugins=())
    cfg = load(profile=prof)
    assert cfg.worker_registry_prefix == "/x/bundle-workers/"
    assert cfg.violations() == []
    assert cfg.stream_build.enabled is False  # no tune hook: the built-in default stays


# --- one error type --------------------------------------------------------------------------


def test_the_app_the_cores_and_profiles_raise_one_configuration_error_type():
    for bad in (lambda: load({"TASK_SLOTS": "x"}), lambda: broken(executor_count=0).validate(),
                lambda: Config(task_slots=0).validate(), lambda: DispatcherConfig(batch_max_rows=0).validate(),
                lambda: get_profile("edge")):
        with pytest.raises(ConfigError):
            bad()


def test_a_core_setting_is_worded_for_the_operator_by_the_cores_rule():
    # The same rule (blockx.core.config.CONFIG_RULES) words the core's message and the app's.
    core = pytest.raises(ConfigError, Config(default_ttl_ms=0).validate).value.problems
    app = broken(worker__default_ttl_ms=0).violations()
    note = "(a zero TTL would expire every inline reservation at once)"
    assert core == [f"defaultTTLMs (default_ttl_ms) must be > 0, got 0 {note}"]
    assert app == [f"worker.defaultTTLMs must be > 0 {note} (got 0)"]
