"""WorkerFullConfig: every knob of a running Worker, and how it is loaded.

Load order (docs/configuration.md): built-in defaults -> the Profile's
registry prefix and `tune_defaults` -> the JSON file named by WORKER_CONFIG (only the
keys present override; unknown keys and wrong JSON types are errors) -> environment
variables. A value written explicitly in the file or the environment always wins,
which is also how an operator rolls back a profile default.

This module holds the dataclasses with their defaults, the derived `effective_*`
values, the conversions to the cores' configs and `load_config`. The rest lives
beside it, one concept a module: field metadata and walks (config_fields), value
parsing (config_values), applying each source (config_sources), the validation
rules (config_checks), addresses and the socket path (addresses). ConfigError is
the core's (blockx.core.config_error): one type for every configuration problem.
Their public names are re-exported here, so callers keep importing from
blockx.app.config."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blockx.app import addresses
from blockx.app.addresses import default_socket_path, outbound_ip, split_host_port
from blockx.app.config_checks import (BLOCK_REGISTRY_SEGMENT, BUNDLE_REGISTRY_SEGMENT, ETCD_LEASE_TTL_MS,
                                      LOG_LEVELS, SPAWN_MODES_SUPPORTED, UDS_PATH_MAX, check_registry_prefix,
                                      expected_registry_segment)
from blockx.app.config_checks import violations as _violations
from blockx.app.config_fields import config_field as _f
from blockx.app.config_fields import env_vars_of
from blockx.app.config_fields import to_dict as _to_dict
from blockx.app.config_sources import apply_env, apply_json, load_config_file
from blockx.app.config_values import INT64_MAX, INT64_MIN, parse_bool, parse_float, parse_int
from blockx.core.config import SNAPSHOT_RETENTION_SLACK_MS, AdmissionConfig, Config
from blockx.core.config_error import ConfigError
from blockx.core.dispatch.config import DispatcherConfig, derive_stall_timeout_ms

if TYPE_CHECKING:
    from blockx.app.profile import Profile

__all__ = [
    "BLOCK_REGISTRY_SEGMENT", "BUNDLE_REGISTRY_SEGMENT", "ETCD_LEASE_TTL_MS", "INT64_MAX", "INT64_MIN",
    "LOG_LEVELS", "MiB", "SPAWN_MODES_SUPPORTED", "STALL_DERIVED_MARGIN_MS", "UDS_PATH_MAX",
    "AdmissionSection", "ConfigError", "DataPlaneSection", "DispatcherSection", "IOBackendSection", "IOBackendsSection",
    "RpcBackendSection", "SqlBackendSection", "StreamBuildSection", "WorkerFullConfig", "WorkerSection",
    "WriterStreamSection",
    "apply_env", "apply_json", "check_registry_prefix", "default_functions_dir", "default_socket_path",
    "env_vars", "expected_registry_segment", "load_config", "load_config_file", "outbound_ip",
    "parse_bool", "parse_float", "parse_int", "split_host_port",
]

MiB = 1024 * 1024
# The executor heartbeat timeout, once coupled to the stall backstop, is stall + this.
STALL_DERIVED_MARGIN_MS = 5_000


def _defaults(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in fields(cls)}


# The defaults of the settings a core config carries are stated there, once.
_WORKER = _defaults(Config)
_ADMISSION = _defaults(AdmissionConfig)
_DISPATCHER = _defaults(DispatcherConfig)


def default_functions_dir() -> str:
    """The example functions shipped inside the package: the dev profile's
    functionsDir, so a new user can run a task at once. The production profiles
    have none unless it is configured (an example such as `sql_query` runs any
    read-only query a client sends on any configured data source)."""
    return str(Path(__file__).resolve().parent.parent / "examples" / "functions")


@dataclass
class WorkerSection:
    task_slots: int = _f(_WORKER["task_slots"], env="TASK_SLOTS", doc="slot pool size")
    default_ttl_ms: int = _f(_WORKER["default_ttl_ms"], json_name="defaultTTLMs", doc="TTL of inline reservations")
    task_deadline_ms: int = _f(_WORKER["task_deadline_ms"], env="TASK_DEADLINE_MS", doc="default task timeout")
    max_task_timeout_ms: int = _f(_WORKER["max_task_timeout_ms"],
                                  env="MAX_TASK_TIMEOUT_MS", doc="cap of task_timeout_ms")
    result_retention_ms: int = _f(_WORKER["result_retention_ms"], env="RESULT_RETENTION_MS")
    watch_disconnect_grace_ms: int = _f(_WORKER["watch_disconnect_grace_ms"],
                                        env="WATCH_DISCONNECT_GRACE_MS", doc="0 disables")
    default_max_attempts: int = _f(_WORKER["default_max_attempts"], env="CALL_RETRY_MAX_ATTEMPTS")
    default_base_backoff_ms: int = _f(_WORKER["default_base_backoff_ms"], env="CALL_RETRY_BASE_BACKOFF_MS")
    default_retry_jitter_percent: int = _f(_WORKER["default_retry_jitter_percent"],
                                           env="CALL_RETRY_JITTER_PERCENT")
    max_slot_ttl_ms: int = _f(_WORKER["max_slot_ttl_ms"], env="MAX_SLOT_TTL_MS", doc="cap of RequestTaskSlot ttl_ms")
    max_payload_bytes: int = _f(_WORKER["max_payload_bytes"], env="MAX_PAYLOAD_BYTES",
                                doc="cap of task.function_call.payload (the builder's JSON, call args included)")
    max_result_handler_config_bytes: int = _f(_WORKER["max_result_handler_config_bytes"],
                                              env="MAX_RESULT_HANDLER_CONFIG_BYTES")
    max_instance_id_bytes: int = _f(_WORKER["max_instance_id_bytes"], env="MAX_INSTANCE_ID_BYTES")
    max_slots_per_identity: int = _f(_WORKER["max_slots_per_identity"], env="MAX_SLOTS_PER_IDENTITY",
                                     doc="fair share: task slots (reserved or running) one identity may hold; "
                                         "0 = half of taskSlots, at least 1; admin is not limited")
    max_queued_call_bytes_per_identity: int = _f(_WORKER["max_queued_call_bytes_per_identity"],
                                                 env="MAX_QUEUED_CALL_BYTES_PER_IDENTITY",
                                                 doc="fair share: payload bytes of one identity's tasks that have "
                                                     "not ended (their calls are built from them); at least "
                                                     "maxPayloadBytes; admin is not limited")


@dataclass
class AdmissionSection:
    builder_slots: int = _f(_ADMISSION["builder_slots"])
    executor_task_slots: int = _f(_ADMISSION["executor_task_slots"], env="EXECUTOR_TASK_SLOTS")
    plugin_slots: int = _f(_ADMISSION["plugin_slots"])
    scan_slots: int = _f(_ADMISSION["scan_slots"], env="SCAN_SLOTS")


@dataclass
class StreamBuildSection:
    enabled: bool = _f(False, env="STREAM_BUILD_ENABLED")
    max_outstanding_batches: int = _f(_DISPATCHER["max_outstanding_batches"])
    batch_max_rows: int = _f(_DISPATCHER["batch_max_rows"])
    batch_max_args_bytes: int = _f(_DISPATCHER["batch_max_args_bytes"])


@dataclass
class WriterStreamSection:
    """A streaming builder's writer, when it can (tableUpserts, bundleWrite), consumes each
    settled batch as the task runs, inside one transaction that becomes visible
    only when the task succeeds (blockx.plugins.plugin_api)."""
    enabled: bool = _f(True, env="WRITER_STREAM_ENABLED",
                       doc="false: every writer runs after the Calls phase over every output")
    keep_outputs: int = _f(1_000, env="WRITER_STREAM_KEEP_OUTPUTS",
                           doc="outputs a streamed task keeps in its TaskResult (the first ones); "
                               "a task's keepOutputs overrides")
    keep_output_bytes: int = _f(1 * MiB, doc="bound of the kept outputs' bytes")
    buffer_bytes: int = _f(8 * MiB, doc="per task: outputs waiting for the writer past which a settled batch's "
                               "credit waits for the writer")
    write_bytes: int = _f(2 * MiB, doc="outputs gathered into one write of the writer")


@dataclass
class DispatcherSection:
    executor_max_inflight: int = _f(_DISPATCHER["executor_max_inflight"])
    executor_max_runnable: int = _f(_DISPATCHER["executor_max_runnable"])
    executor_selection_sample_size: int = _f(_DISPATCHER["executor_selection_sample_size"],
                                             env="EXECUTOR_SELECTION_SAMPLE_SIZE")
    executor_memory_high_watermark: int = _f(_DISPATCHER["executor_memory_high_watermark"],
                                             doc="executor RSS bytes; 0 disables")
    task_max_inflight_calls: int = _f(_DISPATCHER["task_max_inflight_calls"])
    call_deadline_ms: int = _f(_DISPATCHER["call_deadline_ms"],
                               env="CALL_DEADLINE_MS", doc="budget per root-call attempt; 0 = unlimited")
    scheduler_stall_timeout_ms: int = _f(_DISPATCHER["scheduler_stall_timeout_ms"],
                                         env="SCHEDULER_STALL_TIMEOUT_MS", doc="0 = derived")
    max_subcall_depth: int = _f(_DISPATCHER["max_subcall_depth"])
    base_backoff_ms: int = _f(_DISPATCHER["base_backoff_ms"])
    max_backoff_ms: int = _f(_DISPATCHER["max_backoff_ms"], doc="cap on one retry delay before jitter; 0 = no cap")
    instance_fairness: bool = _f(_DISPATCHER["instance_fairness"], env="DISPATCH_INSTANCE_FAIRNESS")
    instance_fairness_quantum: int = _f(_DISPATCHER["instance_fairness_quantum"],
                                        env="DISPATCH_INSTANCE_FAIRNESS_QUANTUM")
    max_collected_output_bytes: int = _f(_DISPATCHER["max_collected_output_bytes"],
                                         env="MAX_COLLECTED_OUTPUT_BYTES", doc="0 = unlimited")


@dataclass
class IOBackendSection:
    enabled: bool = _f(False, doc="devstub: off in the production profiles, on in dev")
    concurrency: int = _f(64, doc="requests served at once across all tasks")
    timeout_ms: int = _f(0, doc="timeout of one backend request; 0 = phaseIoTimeoutMs")


@dataclass
class SqlBackendSection:
    enabled: bool = _f(True)
    concurrency: int = _f(8, doc="requests served at once per data source, across all tasks")
    timeout_ms: int = _f(5_000, env="SQL_IO_TIMEOUT_MS", doc="one sql request, end to end")
    max_rows: int = _f(10_000, env="SQL_IO_MAX_ROWS", doc="a larger result is refused")
    max_result_bytes: int = _f(8 * MiB, env="SQL_IO_MAX_RESULT_BYTES",
                               doc="a result larger as JSON is refused (it must fit one executor frame)")


@dataclass
class RpcBackendSection:
    endpoints: dict[str, dict] = _f(default_factory=dict, env="RPC_ENDPOINTS",
                                    doc='{"name": {"urls": [...], "headers": {"H": {"env": "VAR"}}, '
                                        '"timeoutMs": N, "concurrency": N}}; empty: no rpc backend')
    timeout_ms: int = _f(5_000, env="RPC_IO_TIMEOUT_MS",
                         doc="an endpoint's default: one request from queue to answer, retries included")
    concurrency: int = _f(16, doc="an endpoint's default: HTTP requests in flight to it, across all tasks")
    max_queue: int = _f(1_024, env="RPC_IO_MAX_QUEUE",
                        doc="requests waiting for a connection, all endpoints together; one more is refused")
    max_batch: int = _f(100, doc="JSON-RPC requests sent together in one HTTP POST")
    max_response_bytes: int = _f(8 * MiB, env="RPC_IO_MAX_RESPONSE_BYTES",
                                 doc="a larger HTTP response body is refused")
    retries: int = _f(2, doc="retries after a transient failure (HTTP 429/5xx, refused or reset), on the next URL")
    retry_backoff_ms: int = _f(50, doc="delay before retrying a URL already tried, doubled each time")


@dataclass
class IOBackendsSection:
    devstub: IOBackendSection = _f(default_factory=IOBackendSection)
    sql: SqlBackendSection = _f(default_factory=SqlBackendSection)
    rpc: RpcBackendSection = _f(default_factory=RpcBackendSection)


def default_state_dir() -> str:
    """$XDG_STATE_HOME/blockx, else ~/.local/state/blockx."""
    base = os.environ.get("XDG_STATE_HOME", "") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "blockx")


@dataclass
class DataPlaneSection:
    state_dir: str = _f(default_factory=default_state_dir, env="STATE_DIR",
                        doc="holds the default `local` DuckDB file")
    bundle_root: str = _f("", env="BUNDLE_ROOT", doc="bundle files are read and written under it; "
                                                     "empty: <stateDir>/bundles")
    scan_fetch_rows: int = _f(1_000, doc="rows fetched per round trip by dbscan and bundleScan")
    scan_max_row_bytes: int = _f(4 * MiB, env="SCAN_MAX_ROW_BYTES",
                                 doc="one dbscan / bundleScan row as call arguments; a larger row fails the task")
    bundle_max_files: int = _f(100_000, env="BUNDLE_MAX_FILES", doc="files one bundleScan may match")
    duckdb_memory_limit_mb: int = _f(128, json_name="duckdbMemoryLimitMb",
                                     doc="buffer pool of each DuckDB file source inside the Worker; past it "
                                         "DuckDB evicts and spills to disk; 0 = DuckDB's own (80% of the RAM)")
    duckdb_idle_close_ms: int = _f(5_000, json_name="duckdbIdleCloseMs",
                                   doc="a DuckDB file source no operation used for this long closes, handing "
                                       "back the blocks its buffer pool kept; the next use opens it again "
                                       "(about 20 ms); 0 = keep open")


@dataclass
class WorkerFullConfig:
    listen_addr: str = _f(":8081", env="WORKER_LISTEN")
    worker_addr: str = _f("", env="WORKER_ADDR", doc="empty: listen port + outbound IP")
    etcd_endpoints: list[str] = _f(default_factory=lambda: ["localhost:2379"], env="ETCD_ENDPOINTS",
                                   doc='"none" or empty skips registration')
    worker_registry_prefix: str = _f("", env="WORKER_REGISTRY_PREFIX", doc="from the profile")
    executor_count: int = _f(8, env="EXECUTOR_COUNT")
    executor_spawn_mode: str = _f("process", env="EXECUTOR_SPAWN_MODE",
                                  doc="process or sandbox (bubblewrap or runc, see executorSandboxRuntime)")
    executor_sandbox_runtime: str = _f("bwrap", env="EXECUTOR_SANDBOX_RUNTIME",
                                       doc="sandbox: bwrap (bubblewrap) or oci (a runc container)")
    executor_cpu_millicores: int = _f(0, env="EXECUTOR_CPU_MILLICORES",
                                      doc="sandbox oci: CPU per executor, 1000 = one core; 0 = none")
    executor_python: str = _f("", env="EXECUTOR_PYTHON",
                              doc="interpreter of the executors (a venv with the functions' packages); "
                                  "empty: the Worker's")
    executor_site_packages: list[str] = _f(default_factory=list, env="EXECUTOR_SITE_PACKAGES",
                                           doc="directories of packages for functions, on the executors' path")
    executor_memory_limit_mb: int = _f(1024, env="EXECUTOR_MEMORY_LIMIT_MB", doc="sandbox: per executor; 0 = none")
    executor_max_processes: int = _f(64, env="EXECUTOR_MAX_PROCESSES", doc="sandbox: per executor; 0 = none")
    executor_max_open_files: int = _f(1024, env="EXECUTOR_MAX_OPEN_FILES", doc="sandbox: per executor; 0 = none")
    executor_user: str = _f("nobody", env="EXECUTOR_USER",
                            doc="process mode with the Worker as root: the unprivileged user executors run as")
    executor_output_line_bytes: int = _f(4096, env="EXECUTOR_OUTPUT_LINE_BYTES",
                                         doc="executor stdout/stderr: longer lines are cut in the log")
    executor_output_bytes_per_s: int = _f(65536, env="EXECUTOR_OUTPUT_BYTES_PER_S",
                                          doc="executor stdout/stderr logged per executor and second; "
                                              "the rest is dropped and counted")
    worker: WorkerSection = _f(default_factory=WorkerSection)
    admission: AdmissionSection = _f(default_factory=AdmissionSection)
    stream_build: StreamBuildSection = _f(default_factory=StreamBuildSection)
    writer_stream: WriterStreamSection = _f(default_factory=WriterStreamSection)
    dispatcher: DispatcherSection = _f(default_factory=DispatcherSection)
    heartbeat_interval_ms: int = _f(200, env="WORKER_HEARTBEAT_INTERVAL", env_kind="duration")
    drain_timeout_ms: int = _f(30_000, env="DRAIN_TIMEOUT_MS")
    phase_io_timeout_ms: int = _f(10_000, env="PHASE_IO_TIMEOUT_MS",
                                  doc="Builder / Plugin IO timeout: bounds each IO operation (a statement, a "
                                      "scan step, a file), not the phase, whose whole is bounded by the task "
                                      "deadline; past it a `dbscan` fails the task `BUILDER_FAILED` and a "
                                      "plugin (`tableUpserts`, `bundleWrite`) `PLUGIN_FAILED`, both "
                                      "retryable; it also bounds each statement of the `sql` IO backend and "
                                      "is the `devstub` backend's request timeout unless "
                                      "`ioBackends.devstub.timeoutMs` sets one")
    submit_linger_ms: int = _f(0, env="SUBMIT_LINGER_MS",
                               doc="unary SubmitTask: a task arriving within this of the previous one while "
                                   "another runs waits this long after the first one held, and starts with "
                                   "the others held (their calls go out together): throughput for up to this "
                                   "much latency; 0 = every task starts at once")
    grpc_keepalive_time_ms: int = _f(30_000, env="WORKER_GRPC_KEEPALIVE_TIME_MS")
    grpc_keepalive_timeout_ms: int = _f(10_000, env="WORKER_GRPC_KEEPALIVE_TIMEOUT_MS")
    session_max_pending_events: int = _f(65_536, env="SESSION_MAX_PENDING_EVENTS",
                                         doc="TaskSession: events queued for a client that does not read")
    session_max_pending_bytes: int = _f(64 * 1024 * 1024, env="SESSION_MAX_PENDING_BYTES",
                                        doc="TaskSession: approximate bytes queued for a client that does not read")
    # Bounds of the gRPC side (blockx.adapters.grpc.limits).
    grpc_max_message_bytes: int = _f(64 * MiB, env="WORKER_GRPC_MAX_MESSAGE_BYTES",
                                     doc="largest gRPC message sent or received; a larger result is not delivered")
    result_page_bytes: int = _f(1 * MiB, env="RESULT_PAGE_BYTES",
                                doc="largest message carrying a result: one page of its outputs; "
                                    "at most grpcMaxMessageBytes - 16 KiB")
    grpc_max_concurrent_streams: int = _f(1_000, env="WORKER_GRPC_MAX_CONCURRENT_STREAMS",
                                          doc="HTTP/2 streams (RPCs) at once on one client connection")
    grpc_max_concurrent_rpcs: int = _f(10_000, env="WORKER_GRPC_MAX_CONCURRENT_RPCS",
                                       doc="RPCs in progress across all connections; past it RESOURCE_EXHAUSTED")
    grpc_max_connections: int = _f(1_000, env="WORKER_GRPC_MAX_CONNECTIONS",
                                   doc="client connections at once; a connection past it is closed")
    max_task_sessions: int = _f(1_000, env="MAX_TASK_SESSIONS", doc="TaskSession streams open at once")
    max_watch_streams: int = _f(1_000, env="MAX_WATCH_STREAMS", doc="WatchTasks streams open at once")
    max_task_sessions_per_identity: int = _f(16, env="MAX_TASK_SESSIONS_PER_IDENTITY",
                                             doc="fair share: TaskSession streams one identity keeps open; "
                                                 "admin is not limited")
    max_watch_streams_per_identity: int = _f(256, env="MAX_WATCH_STREAMS_PER_IDENTITY",
                                             doc="fair share: WatchTasks streams one identity keeps open; "
                                                 "admin is not limited")
    memory_budget_bytes: int = _f(0, env="WORKER_MEMORY_BUDGET_BYTES",
                                  doc="resident memory past which new work is refused RESOURCE_EXHAUSTED; "
                                      "0 = 80% of the cgroup memory limit, else of the host's memory")
    watch_max_pending_updates: int = _f(65_536, env="WATCH_MAX_PENDING_UPDATES",
                                        doc="WatchTasks: updates queued for a client that does not read")
    executor_restart_enabled: bool = _f(True, env="EXECUTOR_RESTART_ENABLED")
    executor_restart_delay_ms: int = _f(1000)
    executor_max_restarts: int = _f(10)
    executor_restart_window_ms: int = _f(60_000)
    executor_backoff_ms: int = _f(30_000)
    executor_heartbeat_timeout_ms: int = _f(10_000)
    executor_call_batch: bool = _f(False, env="EXECUTOR_CALL_BATCH",
                                   doc="send the ExecuteCalls queued for one executor in one loop iteration "
                                       "as one ExecuteCallBatch frame, to executors that advertise it")
    executor_budget_preempt_ms: int = _f(50, env="EXECUTOR_BUDGET_PREEMPT_MS",
                                         doc="executors interrupt a call that computes past its budget "
                                             "without yielding, checking every N ms; 0 = only the wedge backstop")
    function_snapshot_retention_ms: int = _f(_WORKER["function_snapshot_retention_ms"],
                                             env="FUNCTION_SNAPSHOT_RETENTION_MS", doc="0 = maxTaskTimeoutMs + 10s")
    functions_dir: str = _f("", env="FUNCTIONS_DIR",
                            doc="<functionId>.py files; empty: none (dev profile: the shipped examples)")
    functions_source: str = _f("dir", env="FUNCTIONS_SOURCE",
                               doc='"dir" (functionsDir), "etcd" (keys under functionsEtcdPrefix) '
                                   'or "redis" (functionsRedisUrl, keys under functionsRedisPrefix)')
    functions_etcd_prefix: str = _f("/blockx/functions/", env="FUNCTIONS_ETCD_PREFIX")
    functions_redis_url: str = _f("redis://127.0.0.1:6379/0", env="FUNCTIONS_REDIS_URL",
                                  doc="redis://[:password@]host:port/db, rediss:// (TLS) or unix://path")
    functions_redis_prefix: str = _f("blockx:functions:", env="FUNCTIONS_REDIS_PREFIX",
                                     doc="<prefix>sources (hash), <prefix>epoch, channel <prefix>changed")
    functions_redis_check_interval_ms: int = _f(1000, env="FUNCTIONS_REDIS_CHECK_INTERVAL_MS",
                                                doc="backstop beside pub/sub: the epoch key read every N ms")
    socket_path: str = _f(default_factory=default_socket_path, env="EXECUTOR_SOCKET_PATH")
    metrics_listen: str = _f("127.0.0.1:9464", env="METRICS_LISTEN", doc="empty disables")
    dashboard_listen: str = _f("", env="DASHBOARD_LISTEN",
                               doc="the worker's own dashboard pages (blockx.dashboard), host:port; empty disables")
    # the memory diagnostics log line (a JSON key only, no environment variable)
    memory_diagnostics_interval_ms: int = _f(60_000, doc="memory_diagnostics log line every N ms; 0 disables")
    shadow_submit_target_addr: str = _f("", env="SHADOW_SUBMIT_TARGET_ADDR")
    shadow_submit_sample_rate: float = _f(0.0, env="SHADOW_SUBMIT_SAMPLE_RATE")
    shadow_submit_token_file: str = _f("", env="SHADOW_SUBMIT_TOKEN_FILE",
                                       doc="the bearer token for the shadow target (a file); empty: $BLOCKX_TOKEN, "
                                           "else <stateDir>/auth-token")
    io_backends: IOBackendsSection = _f(default_factory=IOBackendsSection)
    # Isolation and trust: TLS files are PEM paths; empty = off.
    tls_cert: str = _f("", env="WORKER_TLS_CERT", doc="gRPC port certificate; set with tlsKey: TLS on")
    tls_key: str = _f("", env="WORKER_TLS_KEY")
    tls_client_ca: str = _f("", env="WORKER_TLS_CLIENT_CA", doc="set: mutual TLS, clients need a cert it signed")
    auth_mode: str = _f("token", env="WORKER_AUTH_MODE",
                        doc="token (bearer tokens), mtls (client certificate subject) or none")
    auth_mtls_admins: str = _f("", env="WORKER_AUTH_MTLS_ADMINS",
                               doc="authMode mtls: the identities that are admin, separated by ';' (a subject "
                                   "such as CN=ops,O=acme, or URI:spiffe://...); empty: no admin over mTLS")
    auth_tokens_file: str = _f("", env="WORKER_AUTH_TOKENS_FILE",
                               doc="`name token` a line, re-read on SIGHUP; empty: <stateDir>/auth-token, "
                                   "generated (admin) at start")
    etcd_ca_cert: str = _f("", env="ETCD_CA_CERT", doc="set: TLS towards etcd")
    etcd_cert: str = _f("", env="ETCD_CERT", doc="client certificate towards etcd")
    etcd_key: str = _f("", env="ETCD_KEY")
    etcd_server_name: str = _f("", env="ETCD_SERVER_NAME",
                               doc="with etcdCaCert: the name etcd's certificate is checked for (default: the host)")
    etcd_user: str = _f("", env="ETCD_USER", doc="set: an etcd user (etcd auth), with etcdPassword(File)")
    etcd_password: str = _f("", env="ETCD_PASSWORD", doc="the etcd user's password (never printed)")
    etcd_password_file: str = _f("", env="ETCD_PASSWORD_FILE", doc="a file holding the etcd user's password")
    shadow_tls_ca: str = _f("", env="SHADOW_TLS_CA", doc="set: TLS towards the shadow target")
    shadow_tls_cert: str = _f("", env="SHADOW_TLS_CERT")
    shadow_tls_key: str = _f("", env="SHADOW_TLS_KEY")
    audit_mode: str = _f("off", env="AUDIT_MODE", doc="off, warn or enforce (refuse unapproved code digests)")
    audit_allowlist_file: str = _f("", env="AUDIT_ALLOWLIST_FILE",
                                   doc="approved digests, '<sha256> [approval id]' a line; re-read when it changes")
    audit_allowlist_etcd_prefix: str = _f("", env="AUDIT_ALLOWLIST_ETCD_PREFIX",
                                          doc="e.g. /blockx/audit/: approvals as <prefix><digest> = approval id")
    data_sources: dict[str, str] = _f(default_factory=dict, env="BLOCKX_DATA_SOURCES",
                                      doc='{"name": "postgresql://..." | "duckdb:///path"}; '
                                          'empty: a `local` DuckDB under dataPlane.stateDir')
    data_plane: DataPlaneSection = _f(default_factory=DataPlaneSection)
    log_level: str = _f("INFO", env="LOG_LEVEL")
    # --- task traces (GetTaskTrace, `blockx trace`) ---
    trace_enabled: bool = _f(True, env="TRACE_ENABLED",
                             doc="record a bounded timeline per task, served by GetTaskTrace; false: none")
    trace_max_events_per_task: int = _f(10_000, env="TRACE_MAX_EVENTS_PER_TASK",
                                        doc="cap of one task's trace; past it its calls are sampled")
    trace_retained_max_events: int = _f(2_000_000, env="TRACE_RETAINED_MAX_EVENTS",
                                        doc="budget of events of ended tasks' traces (each counts >= 32); "
                                            "past it the oldest ended traces are evicted")
    # --- end task traces ---
    # OpenTelemetry spans (exported only when OTEL_EXPORTER_OTLP_ENDPOINT is set; otel_export.py)
    otel_call_span_rate: float = _f(0.01, env="BLOCKX_OTEL_CALL_SPAN_RATE",
                                    doc="fraction of a sampled task's calls that get a span of their own, 0..1")

    # The deployment of the profile this config was loaded for (not a JSON key):
    # lets violations() check the registry prefix without being handed the profile.
    _deployment: str = field(default="", repr=False, compare=False, metadata={"internal": True})

    # --- derived values -------------------------------------------------------------

    @property
    def etcd_enabled(self) -> bool:
        return bool(self.etcd_endpoints)

    def effective_function_snapshot_retention_ms(self) -> int:
        if self.function_snapshot_retention_ms == 0:
            return self.worker.max_task_timeout_ms + SNAPSHOT_RETENTION_SLACK_MS
        return self.function_snapshot_retention_ms

    def effective_scheduler_stall_timeout_ms(self) -> int:
        """The wedge backstop threshold.

        Derived as callDeadlineMs + 5 s; an explicit value at or below
        callDeadlineMs + 1 s is raised to the derived one, so a call that is merely
        using its whole budget is never mistaken for a wedged executor. An
        unlimited budget (callDeadlineMs = 0) derives 5 s, so the backstop is never off."""
        d = self.dispatcher
        return derive_stall_timeout_ms(d.call_deadline_ms, d.scheduler_stall_timeout_ms)

    def effective_executor_heartbeat_timeout_ms(self) -> int:
        """Transport-loss threshold: once coupled to the stall backstop it is at least
        stall + 5 s, so the backstop (which kills and restarts) fires first."""
        stall = self.effective_scheduler_stall_timeout_ms()
        if stall > 0:
            return max(self.executor_heartbeat_timeout_ms, stall + STALL_DERIVED_MARGIN_MS)
        return self.executor_heartbeat_timeout_ms

    def grpc_listen_addr(self) -> str:
        """listenAddr in the form grpc's add_insecure_port takes (":8081" -> "[::]:8081")."""
        return addresses.grpc_listen_addr(self.listen_addr)

    def resolved_worker_addr(self, bound_port: int | None = None) -> str:
        """workerAddr, or (when empty) the outbound IP plus the listen port; the etcd
        key suffix and the address the Coordinator dials."""
        return addresses.resolved_worker_addr(self.worker_addr, self.listen_addr, bound_port)

    def log_level_number(self) -> int:
        name = self.log_level.strip().upper()
        return logging.WARNING if name == "WARN" else logging.getLevelName(name)

    # --- conversion to the cores' configs ----------------------------------------------

    def core_config(self) -> Config:
        """blockx.core.config.Config for WorkerCore."""
        return _build(Config, {
            "task_slots": self.worker.task_slots,
            "default_ttl_ms": self.worker.default_ttl_ms,
            "task_deadline_ms": self.worker.task_deadline_ms,
            "max_task_timeout_ms": self.worker.max_task_timeout_ms,
            "result_retention_ms": self.worker.result_retention_ms,
            "watch_disconnect_grace_ms": self.worker.watch_disconnect_grace_ms,
            "default_max_attempts": self.worker.default_max_attempts,
            "default_base_backoff_ms": self.worker.default_base_backoff_ms,
            "default_retry_jitter_percent": self.worker.default_retry_jitter_percent,
            "function_snapshot_retention_ms": self.function_snapshot_retention_ms,
            "max_slot_ttl_ms": self.worker.max_slot_ttl_ms,
            "max_payload_bytes": self.worker.max_payload_bytes,
            "max_result_handler_config_bytes": self.worker.max_result_handler_config_bytes,
            "max_instance_id_bytes": self.worker.max_instance_id_bytes,
            "max_slots_per_identity": self.worker.max_slots_per_identity,
            "max_queued_call_bytes_per_identity": self.worker.max_queued_call_bytes_per_identity,
        })

    def admission_config(self) -> AdmissionConfig:
        """blockx.core.config.AdmissionConfig for the phase admission semaphores."""
        a = self.admission
        return _build(AdmissionConfig, {
            "builder_slots": a.builder_slots,
            "executor_task_slots": a.executor_task_slots,
            "plugin_slots": a.plugin_slots,
            "scan_slots": a.scan_slots,
        })

    def dispatcher_config(self) -> DispatcherConfig:
        """blockx.core.dispatch.config.DispatcherConfig, with the stall timeout
        already derived (the core takes it as given)."""
        d = self.dispatcher
        return _build(DispatcherConfig, {
            "executor_max_inflight": d.executor_max_inflight,
            "executor_max_runnable": d.executor_max_runnable,
            "executor_selection_sample_size": d.executor_selection_sample_size,
            "executor_memory_high_watermark": d.executor_memory_high_watermark,
            "task_max_inflight_calls": d.task_max_inflight_calls,
            "call_deadline_ms": d.call_deadline_ms,
            "scheduler_stall_timeout_ms": self.effective_scheduler_stall_timeout_ms(),
            "max_subcall_depth": d.max_subcall_depth,
            "base_backoff_ms": d.base_backoff_ms,
            "max_backoff_ms": d.max_backoff_ms,
            "instance_fairness": d.instance_fairness,
            "instance_fairness_quantum": d.instance_fairness_quantum,
            "max_collected_output_bytes": d.max_collected_output_bytes,
            "default_max_attempts": self.worker.default_max_attempts,
            "default_retry_jitter_percent": self.worker.default_retry_jitter_percent,
            "max_outstanding_batches": self.stream_build.max_outstanding_batches,
            "batch_max_rows": self.stream_build.batch_max_rows,
            "batch_max_args_bytes": self.stream_build.batch_max_args_bytes,
        })

    # --- serialisation -----------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The configuration under its JSON names (what `--print-config` prints and
        what a WORKER_CONFIG file may contain)."""
        return _to_dict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    # --- validation ----------------------------------------------------------------

    def violations(self, profile: Profile | None = None) -> list[str]:
        return _violations(self, profile.deployment if profile is not None else self._deployment)

    def validate(self, profile: Profile | None = None) -> None:
        problems = self.violations(profile)
        if problems:
            raise ConfigError(problems)


def _build(cls: Any, values: dict[str, Any]):
    """Instantiate a core config dataclass from the keys it declares, so the app
    config can carry fields a core has not (yet) adopted without breaking."""
    if is_dataclass(cls) and isinstance(cls, type):
        names = {f.name for f in fields(cls) if f.init}
        return cls(**{k: v for k, v in values.items() if k in names})
    return cls(**values)


def env_vars() -> dict[str, str]:
    """Environment variable -> JSON path, for docs, tests and error messages."""
    return env_vars_of(WorkerFullConfig())


def load_config(profile: Profile, env: Mapping[str, str] | None = None,
                config_path: str | None = None) -> WorkerFullConfig:
    """defaults -> profile -> WORKER_CONFIG file -> env. `config_path` (the CLI's
    --config) takes the place of $WORKER_CONFIG. Does not validate: call
    `validate(profile)` (the CLI's --print-config shows a config before judging it)."""
    env = os.environ if env is None else env
    cfg = WorkerFullConfig()
    cfg._deployment = profile.deployment
    cfg.worker_registry_prefix = profile.worker_registry_prefix
    if profile.tune_defaults is not None:
        profile.tune_defaults(cfg)
    path = config_path if config_path is not None else env.get("WORKER_CONFIG", "")
    if path:
        load_config_file(cfg, path)
    apply_env(cfg, env)
    return cfg
