"""The rules a loaded WorkerFullConfig must satisfy (`WorkerFullConfig.violations`).

Every broken rule is collected, not just the first, and each message names the
JSON path with its environment variable, e.g. "worker.taskSlots (TASK_SLOTS) must
be > 0 (got 0)", so an operator sees the whole list in one round.

A setting's rule sits with the module that uses the setting, and this module
only collects them and words them for the operator: the cores' (blockx.core.config,
blockx.core.dispatch.config: CONFIG_RULES, ADMISSION_RULES, DISPATCHER_RULES,
deadline_problem, retention_problem, ttl_problem) and those of the adapters and
plugins a setting feeds (a `*_RULES` table of Rule, or a `*_problem(s)` function
that takes the values and a function naming each setting: the gRPC bounds,
result pages, traces, OpenTelemetry, the executor outbox, the writer stream, the IO backends, the data plane, the
function code sources, authentication, audit, the sandbox). From an adapter or a
plugin it imports nothing else (tests/unit/app/test_config_rule_owners.py).
The rules written below are for the settings only the app wires (addresses,
etcd, executor counts and timers, gRPC keepalive, session queues, shadow
traffic, TLS files, logging), including the heartbeat that must stay below the etcd lease
TTL. The config is passed in, never imported, so this module does not depend on
blockx.app.config."""

from __future__ import annotations

import os
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from blockx.adapters.executor.outbox_limits import inflight_problem
from blockx.adapters.grpc.limits import GRPC_RULES
from blockx.adapters.telemetry.otel_spans import OTEL_RULES
from blockx.adapters.telemetry.trace_recorder import TRACE_RULES
from blockx.adapters.writer_stream import WRITER_STREAM_RULES
from blockx.app.addresses import split_host_port
from blockx.app.config_fields import env_vars_of, json_name
from blockx.core.config import (ADMISSION_RULES, CONFIG_RULES, deadline_problem, retention_problem, share_problem,
                                ttl_problem)
from blockx.core.config_rules import Rule, Wording, check
from blockx.core.dispatch.config import DISPATCHER_RULES
from blockx.plugins.data.urls import data_source_problems
from blockx.plugins.io.devstub import DEVSTUB_RULES
from blockx.plugins.io.rpc_endpoints import RPC_RULES, endpoint_problems
from blockx.plugins.io.sql import SQL_RULES

if TYPE_CHECKING:
    from blockx.app.config import WorkerFullConfig

# Linux sun_path is 108 bytes including the terminating NUL.
UDS_PATH_MAX = 107
# The etcd lease the Worker keeps alive with its heartbeats (TTL 10 s).
ETCD_LEASE_TTL_MS = 10_000
SPAWN_MODES_SUPPORTED = ("process", "sandbox")
SANDBOX_RUNTIMES = ("bwrap", "oci")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL")
BLOCK_REGISTRY_SEGMENT = "workers"
BUNDLE_REGISTRY_SEGMENT = "bundle-workers"

# Settings only the app has (top level of the config).
APP_RULES = (
    Rule("executor_count", 1),
    Rule("heartbeat_interval_ms", 1),
    Rule("drain_timeout_ms", 0),
    Rule("phase_io_timeout_ms", 1),
    Rule("submit_linger_ms", 0, 1000, note="0 = off"),
    Rule("grpc_keepalive_time_ms", 1),
    Rule("grpc_keepalive_timeout_ms", 1),
    Rule("session_max_pending_events", 1),
    Rule("session_max_pending_bytes", 1),
    Rule("executor_restart_delay_ms", 0),
    Rule("executor_max_restarts", 0),
    Rule("executor_restart_window_ms", 1),
    Rule("executor_backoff_ms", 0),
    Rule("executor_heartbeat_timeout_ms", 1),
    Rule("executor_budget_preempt_ms", 0, note="0 disables budget preemption"),
    Rule("executor_memory_limit_mb", 0, note="0 = no limit"),
    Rule("executor_max_processes", 0, note="0 = no limit"),
    Rule("executor_max_open_files", 0, note="0 = no limit"),
    Rule("executor_output_line_bytes", 1),
    Rule("executor_output_bytes_per_s", 1),
    Rule("shadow_submit_sample_rate", 0, 1, kind=float),
    Rule("memory_diagnostics_interval_ms", 0, note="0 disables the memory diagnostics log line"),
)


def violations(cfg: WorkerFullConfig, deployment: str) -> list[str]:
    out: list[str] = []
    env_of = {path: env for env, path in env_vars_of(cfg).items()}

    def name(path: str) -> str:
        env = env_of.get(path)
        return f"{path} ({env})" if env else path

    def section(*parts: tuple[Any, str]) -> Wording:
        """Operator wording for the fields of config sections, each (section, JSON prefix)."""
        paths = {f.name: prefix + json_name(f) for obj, prefix in parts for f in fields(obj)}
        return Wording(lambda field: name(paths[field]), operator=True)

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
        elif ep.startswith("https://"):
            out.append(f"{name('etcdEndpoints')}: {ep!r}: write host:port; TLS towards etcd is turned on "
                       f"by {name('etcdCaCert')}")
        elif any(c.isspace() for c in ep) or ":" not in ep.removeprefix("http://").removeprefix("https://"):
            out.append(f"{name('etcdEndpoints')}: {ep!r} is not host:port (or http[s]://host:port)")

    check_registry_prefix(cfg.worker_registry_prefix, deployment, name("workerRegistryPrefix"), out)

    if cfg.executor_spawn_mode not in SPAWN_MODES_SUPPORTED:
        out.append(f"{name('executorSpawnMode')} must be \"process\" or \"sandbox\" "
                   f"(got {cfg.executor_spawn_mode!r})")
    elif cfg.executor_spawn_mode == "process":
        from blockx.adapters.executor.run_as import run_as_problem
        problem = run_as_problem(cfg.executor_user, name("executorUser"))
        if problem:
            out.append(problem)
    elif cfg.executor_sandbox_runtime not in SANDBOX_RUNTIMES:
        pass                                            # said below
    elif cfg.executor_spawn_mode == "sandbox":
        # Never a silent fallback: no bwrap/runc, or no namespaces/cgroups, stops the Worker.
        if cfg.executor_sandbox_runtime == "oci":
            from blockx.adapters.executor.oci import oci_problem as problem_of
        else:
            from blockx.adapters.executor.sandbox import sandbox_problem as problem_of
        problem = problem_of()
        if problem:
            out.append(problem)
    if cfg.executor_python or cfg.executor_site_packages:
        from blockx.adapters.executor.executor_env import executor_env_problems
        out.extend(executor_env_problems(cfg.executor_python, cfg.executor_site_packages,
                                         python_setting=name("executorPython"),
                                         site_setting=name("executorSitePackages")))
    if cfg.executor_sandbox_runtime not in SANDBOX_RUNTIMES:
        out.append(f"{name('executorSandboxRuntime')} must be \"bwrap\" or \"oci\" "
                   f"(got {cfg.executor_sandbox_runtime!r})")
    if type(cfg.executor_cpu_millicores) is int and cfg.executor_cpu_millicores < 0:
        out.append(f"{name('executorCpuMillicores')} must be 0 (no limit) or a positive number of "
                   f"millicores, 1000 = one core (got {cfg.executor_cpu_millicores})")
    elif cfg.executor_cpu_millicores and cfg.executor_sandbox_runtime != "oci":
        out.append(f"{name('executorCpuMillicores')} is a limit of the oci sandbox runtime; set "
                   f"{name('executorSandboxRuntime')} to \"oci\" (with {name('executorSpawnMode')} "
                   "\"sandbox\"), or set it to 0")

    # The settings the cores carry, by the cores' rules.
    top = section((cfg, ""))
    typed = check(cfg.worker, CONFIG_RULES, section((cfg.worker, "worker.")), out)
    typed = check(cfg, CONFIG_RULES, top, out) and typed           # functionSnapshotRetentionMs
    if typed:
        both = section((cfg.worker, "worker."), (cfg, "")).name
        for problem in (deadline_problem(cfg.worker.task_deadline_ms, cfg.worker.max_task_timeout_ms, both),
                        retention_problem(cfg.function_snapshot_retention_ms, cfg.worker.max_task_timeout_ms,
                                          both),
                        ttl_problem(cfg.worker.default_ttl_ms, cfg.worker.max_slot_ttl_ms, both),
                        share_problem(cfg.worker.max_queued_call_bytes_per_identity, cfg.worker.max_payload_bytes,
                                      both)):
            if problem:
                out.append(problem)
    check(cfg.admission, ADMISSION_RULES, section((cfg.admission, "admission.")), out)
    check(cfg.stream_build, DISPATCHER_RULES, section((cfg.stream_build, "streamBuild.")), out)
    check(cfg.writer_stream, WRITER_STREAM_RULES, section((cfg.writer_stream, "writerStream.")), out)
    check(cfg.dispatcher, DISPATCHER_RULES, section((cfg.dispatcher, "dispatcher.")), out)
    if problem := inflight_problem(cfg.dispatcher.executor_max_inflight, name("dispatcher.executorMaxInflight")):
        out.append(problem)

    # The settings only the app has.
    # The top-level settings: the app's own, then those their owners rule (the gRPC
    # bounds, result pages, task traces, OpenTelemetry). result_pages brings
    # protobuf with it: imported only when a config is judged.
    from blockx.adapters.grpc.result_pages import PAGE_RULES, page_bytes_problem
    if check(cfg, APP_RULES + GRPC_RULES + PAGE_RULES + TRACE_RULES + OTEL_RULES, top, out) and \
            (problem := page_bytes_problem(cfg.result_page_bytes, cfg.grpc_max_message_bytes, name)):
        out.append(problem)
    if cfg.etcd_enabled and cfg.heartbeat_interval_ms >= ETCD_LEASE_TTL_MS:
        out.append(f"{name('heartbeatIntervalMs')} ({cfg.heartbeat_interval_ms}) must be below the "
                   f"{ETCD_LEASE_TTL_MS // 1000} s etcd lease TTL, or the registration expires "
                   "between heartbeats (2000 is the recommended production value)")

    # Empty is allowed: a production Worker serves no function until one is configured.
    if cfg.functions_dir and not os.path.isdir(cfg.functions_dir):
        out.append(f"{name('functionsDir')} {cfg.functions_dir!r} is not a directory")

    out.extend(_function_source_violations(cfg, name))

    if not cfg.socket_path:
        out.append(f"{name('socketPath')} must not be empty")
    elif len(os.fsencode(os.path.abspath(cfg.socket_path))) > UDS_PATH_MAX:
        out.append(f"{name('socketPath')} {cfg.socket_path!r} is longer than the {UDS_PATH_MAX}-byte "
                   "Unix socket path limit")

    addr("metricsListen", cfg.metrics_listen, allow_empty=True)
    addr("dashboardListen", cfg.dashboard_listen, allow_empty=True)

    rate = cfg.shadow_submit_sample_rate
    addr("shadowSubmitTargetAddr", cfg.shadow_submit_target_addr, allow_empty=True)
    if rate > 0 and not cfg.shadow_submit_target_addr:
        out.append(f"{name('shadowSubmitSampleRate')} is {rate} but {name('shadowSubmitTargetAddr')} is "
                   "empty: set a target Worker or set the rate to 0")
    if cfg.shadow_submit_target_addr and cfg.worker_addr and cfg.shadow_submit_target_addr == cfg.worker_addr:
        out.append(f"{name('shadowSubmitTargetAddr')} is this Worker's own address; shadow traffic "
                   "would loop back")

    dev = cfg.io_backends.devstub
    check(dev, DEVSTUB_RULES, section((dev, "ioBackends.devstub.")), out)
    sql = cfg.io_backends.sql
    check(sql, SQL_RULES, section((sql, "ioBackends.sql.")), out)
    rpc = cfg.io_backends.rpc
    if check(rpc, RPC_RULES, section((rpc, "ioBackends.rpc.")), out):
        out.extend(endpoint_problems(rpc.endpoints, timeout_ms=rpc.timeout_ms, concurrency=rpc.concurrency,
                                     environ=os.environ))
    # The data plane's rules import DuckDB with it: only when a config is judged.
    from blockx.plugins.data.plane import DATA_PLANE_RULES, default_source_problem
    check(cfg.data_plane, DATA_PLANE_RULES, section((cfg.data_plane, "dataPlane.")), out)
    out.extend(data_source_problems(cfg.data_sources, name("dataSources")))
    if problem := default_source_problem(cfg.data_sources, cfg.data_plane.state_dir, name("dataPlane.stateDir")):
        out.append(problem)

    tls_problems(cfg, name, out)
    auth_problems(cfg, name, out)
    from blockx.adapters.audit import audit_problems
    out.extend(audit_problems(cfg.audit_mode, cfg.audit_allowlist_file, cfg.audit_allowlist_etcd_prefix,
                              cfg.etcd_enabled, name))

    if cfg.log_level.strip().upper() not in LOG_LEVELS:
        out.append(f"{name('logLevel')} must be one of debug, info, warning, error, critical "
                   f"(got {cfg.log_level!r})")
    return out


FUNCTION_SOURCES = ("dir", "etcd", "redis")


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
    if cfg.functions_source == "redis":
        from blockx.plugins.function_code.redis_store import redis_source_problems
        out.extend(redis_source_problems(cfg.functions_redis_url, cfg.functions_redis_prefix,
                                         cfg.functions_redis_check_interval_ms, name))
    return out


def auth_problems(cfg: WorkerFullConfig, name, out: list[str]) -> None:
    """The API's authentication (adapters.auth's rules), then the shadow target's
    token file, which only has to be a file."""
    from blockx.adapters.auth import auth_problems as api_auth_problems

    out.extend(api_auth_problems(cfg.auth_mode, cfg.auth_tokens_file, cfg.data_plane.state_dir,
                                 tls_cert=cfg.tls_cert, tls_client_ca=cfg.tls_client_ca, name=name))
    if cfg.shadow_submit_token_file and not os.path.isfile(cfg.shadow_submit_token_file):
        out.append(f"{name('shadowSubmitTokenFile')} {cfg.shadow_submit_token_file!r} is not a readable file")


def tls_problems(cfg: WorkerFullConfig, name, out: list[str]) -> None:
    """TLS files: a certificate goes with its key, a CA for client certificates
    needs the port's own certificate, and every named file must exist."""
    pairs = (("tlsCert", cfg.tls_cert, "tlsKey", cfg.tls_key),
             ("etcdCert", cfg.etcd_cert, "etcdKey", cfg.etcd_key),
             ("shadowTlsCert", cfg.shadow_tls_cert, "shadowTlsKey", cfg.shadow_tls_key))
    for cert_path, cert, key_path, key in pairs:
        if bool(cert) != bool(key):
            out.append(f"{name(cert_path)} and {name(key_path)} must be set together")
    if bool(cfg.etcd_user) != bool(cfg.etcd_password or cfg.etcd_password_file):
        out.append(f"{name('etcdUser')} and {name('etcdPassword')} (or {name('etcdPasswordFile')}) "
                   "must be set together")
    if cfg.etcd_password and cfg.etcd_password_file:
        out.append(f"{name('etcdPassword')} and {name('etcdPasswordFile')} both set: set one")
    if cfg.etcd_server_name and not cfg.etcd_ca_cert:
        out.append(f"{name('etcdServerName')} is a TLS setting: it needs {name('etcdCaCert')}")
    if cfg.tls_client_ca and not cfg.tls_cert:
        out.append(f"{name('tlsClientCa')} needs {name('tlsCert')} and {name('tlsKey')}: "
                   "mutual TLS is TLS first")
    for path, value in (("tlsCert", cfg.tls_cert), ("tlsKey", cfg.tls_key), ("tlsClientCa", cfg.tls_client_ca),
                        ("etcdCaCert", cfg.etcd_ca_cert), ("etcdCert", cfg.etcd_cert), ("etcdKey", cfg.etcd_key),
                        ("etcdPasswordFile", cfg.etcd_password_file),
                        ("shadowTlsCa", cfg.shadow_tls_ca), ("shadowTlsCert", cfg.shadow_tls_cert),
                        ("shadowTlsKey", cfg.shadow_tls_key)):
        if value and not os.path.isfile(value):
            out.append(f"{name(path)} {value!r} is not a readable file")


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
