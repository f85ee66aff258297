"""The rules a loaded WorkerFullConfig must satisfy (`WorkerFullConfig.violations`).

Every broken rule is collected, not just the first, and each message names the
JSON path with its environment variable, e.g. "worker.taskSlots (TASK_SLOTS) must
be > 0 (got 0)", so an operator sees the whole list in one round. Rules that
couple fields (taskDeadlineMs <= maxTaskTimeoutMs, the heartbeat below the etcd
lease TTL, snapshot retention covering the longest task) live here too. The config
is passed in, never imported, so this module does not depend on blockx.app.config."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from blockx.app.addresses import split_host_port
from blockx.app.config_fields import env_vars_of
from blockx.core.config import MAX_RETRY_JITTER_PERCENT
from blockx.core.dispatcher_config import MAX_FAIRNESS_QUANTUM

if TYPE_CHECKING:
    from blockx.app.config import WorkerFullConfig

# Linux sun_path is 108 bytes including the terminating NUL.
UDS_PATH_MAX = 107
# The etcd lease the Worker keeps alive with its heartbeats (spec: TTL 10 s).
ETCD_LEASE_TTL_MS = 10_000
SPAWN_MODES_SUPPORTED = ("process",)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL")
BLOCK_REGISTRY_SEGMENT = "workers"
BUNDLE_REGISTRY_SEGMENT = "bundle-workers"


def violations(cfg: WorkerFullConfig, deployment: str) -> list[str]:
    out: list[str] = []
    env_of = {path: env for env, path in env_vars_of(cfg).items()}

    def name(path: str) -> str:
        env = env_of.get(path)
        return f"{path} ({env})" if env else path

    def need(cond: bool, path: str, rule: str, value: Any) -> None:
        if not cond:
            out.append(f"{name(path)} must be {rule} (got {value!r})")

    def addr(path: str, value: str, allow_empty: bool = False) -> None:
        if allow_empty and value == "":
            return
        try:
            split_host_port(value)
        except ValueError as exc:
            out.append(f"{name(path)} is not a valid address: {exc}")

    addr("listenAddr", cfg.listen_addr)
    addr("workerAddr", cfg.worker_addr, allow_empty=True)
    if cfg.worker_addr:
        try:
            if split_host_port(cfg.worker_addr)[1] == 0:
                out.append(f"{name('workerAddr')} must name a real port, not 0 (got {cfg.worker_addr!r})")
        except ValueError:
            pass
    for ep in cfg.etcd_endpoints:
        if ep.lower() == "none":
            out.append(f"{name('etcdEndpoints')}: \"none\" must be the only entry to disable registration")
        elif any(c.isspace() for c in ep) or ":" not in ep.removeprefix("http://").removeprefix("https://"):
            out.append(f"{name('etcdEndpoints')}: {ep!r} is not host:port (or http[s]://host:port)")

    check_registry_prefix(cfg.worker_registry_prefix, deployment, name("workerRegistryPrefix"), out)

    need(cfg.executor_count > 0, "executorCount", "> 0", cfg.executor_count)
    if cfg.executor_spawn_mode == "sandbox":
        out.append(f"{name('executorSpawnMode')} \"sandbox\" is not supported in this build; "
                   "use \"process\"")
    elif cfg.executor_spawn_mode not in SPAWN_MODES_SUPPORTED:
        out.append(f"{name('executorSpawnMode')} must be \"process\" (got {cfg.executor_spawn_mode!r})")

    w = cfg.worker
    need(w.task_slots > 0, "worker.taskSlots", "> 0", w.task_slots)
    need(w.default_ttl_ms > 0, "worker.defaultTTLMs", "> 0", w.default_ttl_ms)
    need(w.task_deadline_ms > 0, "worker.taskDeadlineMs", "> 0", w.task_deadline_ms)
    need(w.max_task_timeout_ms > 0, "worker.maxTaskTimeoutMs", "> 0", w.max_task_timeout_ms)
    if w.task_deadline_ms > w.max_task_timeout_ms > 0:
        out.append(f"{name('worker.taskDeadlineMs')} ({w.task_deadline_ms}) must not exceed "
                   f"{name('worker.maxTaskTimeoutMs')} ({w.max_task_timeout_ms})")
    need(w.result_retention_ms >= 0, "worker.resultRetentionMs", ">= 0", w.result_retention_ms)
    need(w.watch_disconnect_grace_ms >= 0, "worker.watchDisconnectGraceMs", ">= 0 (0 disables)",
         w.watch_disconnect_grace_ms)
    need(w.default_max_attempts >= 1, "worker.defaultMaxAttempts", ">= 1", w.default_max_attempts)
    need(w.default_base_backoff_ms >= 0, "worker.defaultBaseBackoffMs", ">= 0", w.default_base_backoff_ms)
    need(0 <= w.default_retry_jitter_percent <= MAX_RETRY_JITTER_PERCENT,
         "worker.defaultRetryJitterPercent", f"between 0 and {MAX_RETRY_JITTER_PERCENT}",
         w.default_retry_jitter_percent)

    a = cfg.admission
    for key, value in (("builderSlots", a.builder_slots), ("executorTaskSlots", a.executor_task_slots),
                       ("pluginSlots", a.plugin_slots), ("scanSlots", a.scan_slots)):
        need(value > 0, f"admission.{key}", "> 0", value)

    s = cfg.stream_build
    need(s.max_outstanding_batches > 0, "streamBuild.maxOutstandingBatches", "> 0", s.max_outstanding_batches)
    need(s.batch_max_rows > 0, "streamBuild.batchMaxRows", "> 0", s.batch_max_rows)
    need(s.batch_max_args_bytes > 0, "streamBuild.batchMaxArgsBytes", "> 0", s.batch_max_args_bytes)

    d = cfg.dispatcher
    need(d.executor_max_inflight > 0, "dispatcher.executorMaxInflight", "> 0", d.executor_max_inflight)
    need(d.executor_max_runnable >= 0, "dispatcher.executorMaxRunnable", ">= 0 (0 disables the filter)",
         d.executor_max_runnable)
    need(d.executor_selection_sample_size >= 0, "dispatcher.executorSelectionSampleSize",
         ">= 0 (0 scores every candidate)", d.executor_selection_sample_size)
    need(d.executor_memory_high_watermark >= 0, "dispatcher.executorMemoryHighWatermark",
         ">= 0 (0 disables)", d.executor_memory_high_watermark)
    need(d.task_max_inflight_calls > 0, "dispatcher.taskMaxInflightCalls", "> 0", d.task_max_inflight_calls)
    need(d.call_deadline_ms >= 0, "dispatcher.callDeadlineMs", ">= 0 (0 = unlimited)", d.call_deadline_ms)
    need(d.scheduler_stall_timeout_ms >= 0, "dispatcher.schedulerStallTimeoutMs", ">= 0 (0 = derived)",
         d.scheduler_stall_timeout_ms)
    need(d.max_subcall_depth >= 0, "dispatcher.maxSubcallDepth", ">= 0", d.max_subcall_depth)
    need(d.base_backoff_ms >= 0, "dispatcher.baseBackoffMs", ">= 0", d.base_backoff_ms)
    need(d.max_backoff_ms >= 0, "dispatcher.maxBackoffMs", ">= 0 (0 = no cap)", d.max_backoff_ms)
    need(0 <= d.instance_fairness_quantum <= MAX_FAIRNESS_QUANTUM, "dispatcher.instanceFairnessQuantum",
         f"between 0 and {MAX_FAIRNESS_QUANTUM}", d.instance_fairness_quantum)
    need(d.max_collected_output_bytes >= 0, "dispatcher.maxCollectedOutputBytes", ">= 0 (0 = unlimited)",
         d.max_collected_output_bytes)

    need(cfg.heartbeat_interval_ms > 0, "heartbeatIntervalMs", "> 0", cfg.heartbeat_interval_ms)
    if cfg.etcd_enabled and cfg.heartbeat_interval_ms >= ETCD_LEASE_TTL_MS:
        out.append(f"{name('heartbeatIntervalMs')} ({cfg.heartbeat_interval_ms}) must be below the "
                   f"{ETCD_LEASE_TTL_MS // 1000} s etcd lease TTL, or the registration expires "
                   "between heartbeats (2000 is the recommended production value)")
    need(cfg.drain_timeout_ms >= 0, "drainTimeoutMs", ">= 0", cfg.drain_timeout_ms)
    need(cfg.phase_io_timeout_ms > 0, "phaseIoTimeoutMs", "> 0", cfg.phase_io_timeout_ms)
    need(cfg.grpc_keepalive_time_ms > 0, "grpcKeepaliveTimeMs", "> 0", cfg.grpc_keepalive_time_ms)
    need(cfg.grpc_keepalive_timeout_ms > 0, "grpcKeepaliveTimeoutMs", "> 0", cfg.grpc_keepalive_timeout_ms)
    need(cfg.session_max_pending_events > 0, "sessionMaxPendingEvents", "> 0", cfg.session_max_pending_events)
    need(cfg.session_max_pending_bytes > 0, "sessionMaxPendingBytes", "> 0", cfg.session_max_pending_bytes)
    need(cfg.executor_restart_delay_ms >= 0, "executorRestartDelayMs", ">= 0", cfg.executor_restart_delay_ms)
    need(cfg.executor_max_restarts >= 0, "executorMaxRestarts", ">= 0", cfg.executor_max_restarts)
    need(cfg.executor_restart_window_ms > 0, "executorRestartWindowMs", "> 0", cfg.executor_restart_window_ms)
    need(cfg.executor_backoff_ms >= 0, "executorBackoffMs", ">= 0", cfg.executor_backoff_ms)
    need(cfg.executor_heartbeat_timeout_ms > 0, "executorHeartbeatTimeoutMs", "> 0",
         cfg.executor_heartbeat_timeout_ms)

    r = cfg.function_snapshot_retention_ms
    if r != 0 and r < w.max_task_timeout_ms:
        out.append(f"{name('functionSnapshotRetentionMs')} ({r}) must be 0 (= maxTaskTimeoutMs + 10s) or "
                   f">= {name('worker.maxTaskTimeoutMs')} ({w.max_task_timeout_ms}), so a snapshot "
                   "pinned by a running task is never purged")

    if not cfg.functions_dir:
        out.append(f"{name('functionsDir')} must not be empty")
    elif not os.path.isdir(cfg.functions_dir):
        out.append(f"{name('functionsDir')} {cfg.functions_dir!r} is not a directory")

    out.extend(_function_source_violations(cfg, name))

    if not cfg.socket_path:
        out.append(f"{name('socketPath')} must not be empty")
    elif len(os.fsencode(os.path.abspath(cfg.socket_path))) > UDS_PATH_MAX:
        out.append(f"{name('socketPath')} {cfg.socket_path!r} is longer than the {UDS_PATH_MAX}-byte "
                   "Unix socket path limit")

    addr("metricsListen", cfg.metrics_listen, allow_empty=True)

    rate = cfg.shadow_submit_sample_rate
    need(0.0 <= rate <= 1.0, "shadowSubmitSampleRate", "between 0 and 1", rate)
    addr("shadowSubmitTargetAddr", cfg.shadow_submit_target_addr, allow_empty=True)
    if rate > 0 and not cfg.shadow_submit_target_addr:
        out.append(f"{name('shadowSubmitSampleRate')} is {rate} but {name('shadowSubmitTargetAddr')} is "
                   "empty: set a target Worker or set the rate to 0")
    if cfg.shadow_submit_target_addr and cfg.worker_addr and cfg.shadow_submit_target_addr == cfg.worker_addr:
        out.append(f"{name('shadowSubmitTargetAddr')} is this Worker's own address; shadow traffic "
                   "would loop back")

    dev = cfg.io_backends.devstub
    need(dev.concurrency > 0, "ioBackends.devstub.concurrency", "> 0", dev.concurrency)

    if cfg.log_level.strip().upper() not in LOG_LEVELS:
        out.append(f"{name('logLevel')} must be one of debug, info, warning, error, critical "
                   f"(got {cfg.log_level!r})")
    return out


FUNCTION_SOURCES = ("dir", "etcd")


def _function_source_violations(cfg: WorkerFullConfig, name) -> list[str]:
    out: list[str] = []
    if cfg.functions_source not in FUNCTION_SOURCES:
        out.append(f"{name('functionsSource')} must be one of {', '.join(FUNCTION_SOURCES)} "
                   f"(got {cfg.functions_source!r})")
    elif cfg.functions_source == "etcd" and not cfg.etcd_enabled:
        out.append(f"{name('functionsSource')} is etcd but {name('etcdEndpoints')} is \"none\": "
                   "function code needs an etcd to read from")
    p = cfg.functions_etcd_prefix
    if not (p.startswith("/") and p.endswith("/") and len(p) > 1):
        out.append(f"{name('functionsEtcdPrefix')} must start and end with '/' (got {p!r})")
    return out


def expected_registry_segment(deployment: str) -> str | None:
    return {"block": BLOCK_REGISTRY_SEGMENT, "bundle": BUNDLE_REGISTRY_SEGMENT}.get(deployment)


def check_registry_prefix(prefix: str, deployment: str, label: str, out: list[str]) -> None:
    """The prefix is an etcd key directory: "/.../workers/" for block, "/.../bundle-workers/"
    for bundle. A block Worker under the bundle prefix (or the reverse) would be
    picked by the wrong Coordinator, so the last segment must match the deployment;
    leading segments are free (e.g. a per-environment namespace)."""
    if not prefix:
        out.append(f"{label} must not be empty")
        return
    if not prefix.startswith("/") or not prefix.endswith("/") or "//" in prefix:
        out.append(f"{label} {prefix!r} must start and end with '/' (e.g. \"/blockx/workers/\")")
        return
    if any(c.isspace() for c in prefix):
        out.append(f"{label} {prefix!r} must not contain whitespace")
        return
    want = expected_registry_segment(deployment)
    if want is None:
        return
    last = prefix.rstrip("/").rsplit("/", 1)[-1]
    if last != want:
        example = "/blockx/workers/" if deployment == "block" else "/blockx/bundle-workers/"
        out.append(f"{label} {prefix!r} does not match deployment {deployment!r}: its last segment "
                   f"must be {want!r} (e.g. {example!r})")
