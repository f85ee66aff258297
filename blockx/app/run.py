"""`serve(cfg, profile)`: the one wiring and start / stop sequence of a Worker.

Start, in this order: logging and metrics -> IO backends, Function Code View,
registries, cores, Orchestrator, gRPC server -> UDS adapter and executor pool ->
dispatch actor + 500 ms tick -> gRPC serve -> on the first healthy executor:
ready, health SERVING, etcd registration and heartbeats.

Stop on SIGTERM / SIGINT. Phase 1 (drain): stop registration, SetDraining
(new RequestTaskSlot / not-yet-activated SubmitTask get UNAVAILABLE), health
NOT_SERVING, etcd Deregister, WaitDrain up to drainTimeoutMs. A second signal or
the drain timeout ends phase 1 early. Phase 2 (force): tasks still running end
FAILED / WORKER_SHUTDOWN (their watchers get the terminal update), then stop the
pool, close the executor adapter, the IO scopes, then the Watch streams (after
what they queued), gRPC stop with 5 s grace.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import os
import random
import signal
import time

import uvloop

from blockx import __version__
from blockx.adapters.admission import Admission
from blockx.adapters.audit import AuditAllowlist, AuditGate, EtcdAuditAllowlist
from blockx.adapters.auth import Authenticator, warn_if_cleartext_tokens, warn_if_open
from blockx.adapters.auth_tokens import TokenStore, ensure_local_token, read_local_tokens
from blockx.adapters.etcd_publisher import EtcdPublisher
from blockx.adapters.executor.adapter import ExecutorAdapter
from blockx.adapters.executor.credentials import ExecutorCredentials
from blockx.adapters.executor.oci import OciSandbox
from blockx.adapters.executor.output import ExecutorOutput
from blockx.adapters.executor.executor_env import ExecutorEnvironment
from blockx.adapters.executor.pool import PoolManager, build_child_env, executor_ids
from blockx.adapters.executor.run_as import executor_run_as_user
from blockx.adapters.executor.sandbox import Sandbox, SandboxLimits
from blockx.adapters.grpc.limits import GrpcLimits
from blockx.adapters.grpc.server import build_server, set_alive, set_health
from blockx.adapters.heap_release import release_large_blocks
from blockx.adapters.memory_budget import MemoryBudget
from blockx.adapters.mtls_identity import admin_identities
from blockx.adapters.systemd_notify import SystemdNotifier
from blockx.adapters.telemetry.metrics import Metrics
from blockx.adapters.telemetry import otel_export
from blockx.adapters.telemetry.otel_pipe import ExporterPipe
from blockx.adapters.telemetry.otel_spans import TaskSpans
from blockx.adapters.orchestrator import Orchestrator, wall_ms
from blockx.adapters.telemetry.trace_recorder import TraceStore
from blockx.adapters.shadow import ShadowForwarder
from blockx.adapters.tls import ServerTLS, ServerTLSFiles
from blockx.adapters.worker_status import WorkerStatusReader
from blockx.app.bundle_sweep import BundleSweep
from blockx.app.idle_sources import IdleSources
from blockx.app.logs import setup_logging
from blockx.log_event import log_event
from blockx.app.memory_diagnostics import MemoryDiagnostics
from blockx.app.state_dir import ensure_state_dir
from blockx.credentials import resolve_token
from blockx.app.metrics_addr import advertised_metrics_addr
from blockx.etcd.connection import EtcdConnection
from blockx.tls.client_tls import ClientTLS
from blockx.core.dispatch.dispatcher import DispatcherCore
from blockx.core.worker.core import WorkerCore
from blockx.plugins.builders import BuilderRegistry
from blockx.plugins.data.plane import DataPlane
from blockx.plugins.function_code.directory import FunctionCodeDirectory
from blockx.plugins.function_code.etcd import FunctionCodeEtcd
from blockx.plugins.function_code.none import NO_SOURCE, FunctionCodeNone
from blockx.plugins.function_code.redis import FunctionCodeRedis
from blockx.plugins.io.scope import IOScopeFactory
from blockx.plugins.writers import PluginRegistry

log = logging.getLogger("blockx.worker")
TICK_S = 0.5
GRPC_STOP_GRACE_S = 5.0
GC_GEN0_THRESHOLD = 20_000


def server_tls(cfg) -> ServerTLS | None:
    """The gRPC port's TLS (WORKER_TLS_CERT / _KEY / _CLIENT_CA), None when off."""
    if not cfg.tls_cert:
        return None
    return ServerTLS(ServerTLSFiles(cfg.tls_cert, cfg.tls_key, cfg.tls_client_ca))


def authenticator(cfg) -> Authenticator:
    """WORKER_AUTH_MODE: token (WORKER_AUTH_TOKENS_FILE, else the generated
    <stateDir>/auth-token), mtls or none."""
    if cfg.auth_mode != "token":
        return Authenticator(cfg.auth_mode, mtls_admins=admin_identities(cfg.auth_mtls_admins))
    if cfg.auth_tokens_file:
        return Authenticator("token", TokenStore(cfg.auth_tokens_file))
    # checked on the descriptors it is read from, at start and on SIGHUP: the config check may be stale
    local = ensure_local_token(cfg.data_plane.state_dir)
    return Authenticator("token", TokenStore(local, read=read_local_tokens))


def shadow_token(cfg) -> str | None:
    """The bearer token shadow copies carry: SHADOW_SUBMIT_TOKEN_FILE (the token, or a
    `name token` line), else $BLOCKX_TOKEN, else <stateDir>/auth-token when the
    target is on this host."""
    if cfg.shadow_submit_token_file:
        with open(cfg.shadow_submit_token_file, encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if parts and not parts[0].startswith("#"):
                    return parts[-1]
        return None
    return resolve_token(env={**os.environ, "STATE_DIR": cfg.data_plane.state_dir},
                         addr=cfg.shadow_submit_target_addr or None)   # the local token stays on this host


def client_tls(ca: str, cert: str, key: str) -> ClientTLS | None:
    """TLS towards a peer (etcd, the shadow target): on when any file is set."""
    return ClientTLS(ca, cert, key) if (ca or cert or key) else None


async def task_spans(cfg, profile, env=os.environ) -> TaskSpans | None:
    """OpenTelemetry span export over OTLP/gRPC when OTEL_EXPORTER_OTLP_ENDPOINT is set
    (otel_export.py): the hooks record, an exporter process of its own runs the SDK
    (otel_pipe.py), under the profile's service name unless OTEL_SERVICE_NAME says
    another; None when off."""
    if not otel_export.requested(env):
        return None
    pipe = await ExporterPipe.start(profile.service)
    log_event(log, "otel_export", endpoint=env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
              or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", ""), service=otel_export.service_name(profile.service, env),
              call_span_rate=cfg.otel_call_span_rate, exporter_pid=pipe.pid)
    return TaskSpans(pipe, call_span_rate=cfg.otel_call_span_rate)


def executor_sandbox(cfg, extra_readonly: tuple[str, ...] = ()) -> Sandbox | OciSandbox | None:
    """EXECUTOR_SPAWN_MODE=sandbox: bubblewrap or a runc container around every
    executor (EXECUTOR_SANDBOX_RUNTIME; config validation already refused a
    machine where it cannot run)."""
    if cfg.executor_spawn_mode != "sandbox":
        return None
    limits = SandboxLimits(cfg.executor_memory_limit_mb, cfg.executor_max_processes, cfg.executor_max_open_files)
    sandbox: Sandbox | OciSandbox
    if cfg.executor_sandbox_runtime == "oci":
        sandbox = OciSandbox(limits, functions_dir=cfg.functions_dir,
                             cpu_millicores=cfg.executor_cpu_millicores, extra_readonly=extra_readonly)
    else:
        sandbox = Sandbox(limits, functions_dir=cfg.functions_dir, extra_readonly=extra_readonly)
    log_event(log, "executor_sandbox", mode="sandbox", runtime=sandbox.runtime, sandbox=sandbox.describe())
    return sandbox


def executor_args(cfg) -> list[str]:
    """Executor flags the config sets: budget preemption is on unless set to 0."""
    if cfg.executor_budget_preempt_ms > 0:
        return ["--budget-preempt-ms", str(cfg.executor_budget_preempt_ms)]
    return []


def serve(cfg, profile) -> int:
    """Run a Worker until SIGTERM / SIGINT; returns the process exit code."""
    # Executors are started with vfork/posix_spawn (no atfork handlers), but keep
    # gRPC's fork support off so nothing in this process ever forks noisily.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
    release_large_blocks()      # a refused megabyte request gives its memory back (heap_release.py)
    setup_logging(cfg.log_level, batched=True, lean_records=True,
                  static_fields={"service": profile.service, "deployment": profile.deployment})
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(Worker(cfg, profile).run())


class Worker:
    def __init__(self, cfg, profile) -> None:
        self.cfg = cfg
        # The one etcd connection (endpoints, TLS, etcd user): registration, the
        # function-code watch and the audit allowlist are all made from it.
        self.etcd = EtcdConnection.from_config(cfg)
        self.metrics_port = 0
        self.profile = profile
        self.started_at_ms = wall_ms()
        self._stop = asyncio.Event()
        self._force = asyncio.Event()
        self._signals = 0
        self.systemd = SystemdNotifier()

    def _heartbeat(self) -> dict:
        hb = self.orch.core.derive_heartbeat(wall_ms())
        hb.update({
            "workerAddr": self.worker_addr, "deployment": self.profile.deployment,
            "service": self.profile.service, "version": __version__,
            "executorsHealthy": self.adapter.healthy_count(), "executorsTotal": self.cfg.executor_count,
            "startedAtMs": self.started_at_ms,
            # the fleet at a glance: where to scrape, and how the Worker is reached
            "metricsAddr": advertised_metrics_addr(self.cfg.metrics_listen, self.metrics_port, self.worker_addr),
            "tls": "off" if self.tls is None else ("mutual" if self.tls.mutual else "on"),
            "authMode": self.auth.mode, "etcdSecurity": self.etcd.describe(),
        })
        return hb

    def _on_signal(self, signum: int) -> None:
        self._signals += 1
        if self._signals == 1:
            log_event(log, "shutdown_requested", signal=signal.Signals(signum).name,
                      drain_timeout_ms=self.cfg.drain_timeout_ms)
            self._stop.set()
        else:
            log_event(log, "shutdown_forced", signal=signal.Signals(signum).name)
            self._force.set()

    def _on_sighup(self) -> None:
        """Re-read the TLS files and the tokens file; each keeps what it has on a failure."""
        if self.tls is not None:
            self.tls.reload()
        if self.auth.tokens is not None:
            self.auth.tokens.reload()

    def _on_ready(self) -> None:
        log_event(log, "worker_ready", executors_healthy=self.adapter.healthy_count())
        asyncio.get_running_loop().create_task(self._become_ready())

    async def _become_ready(self) -> None:
        if self._stop.is_set():
            return
        await set_health(self.health, True)
        if self._stop.is_set():
            # The signal came during the await: the drain already set health
            # NOT_SERVING and deregistered; stay out of health and the registry
            # (the publisher also refuses a start after its deregister).
            await set_health(self.health, False)
            return
        await self.publisher.start()
        self.systemd.ready(f"ready: {self.adapter.healthy_count()} executors, "
                           f"{self.cfg.worker.task_slots} task slots on {self.worker_addr}")

    def _audit_gate(self, metrics) -> AuditGate | None:
        cfg = self.cfg
        if cfg.audit_mode == "off":
            return None
        allowlist = AuditAllowlist(cfg.audit_allowlist_file) if cfg.audit_allowlist_file else None
        etcd = None
        if cfg.audit_allowlist_etcd_prefix:
            etcd = EtcdAuditAllowlist(self.etcd.client(0, timeout=5), cfg.audit_allowlist_etcd_prefix)
        return AuditGate(cfg.audit_mode, allowlist, metrics, etcd=etcd)

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                if self.orch.actor.audit is not None:
                    self.orch.actor.audit.refresh()   # approvals added at run time
                self.orch.tick()
            except Exception:  # noqa: BLE001 - the tick must keep running
                log.exception("tick failed")

    async def _function_code(self, cfg):
        """The Function Code View of FUNCTIONS_SOURCE: the directory, or etcd (read once
        here, waiting a few seconds for etcd, then followed by a watch). With neither
        configured (the production profiles' default) an empty view, said once in the log."""
        if cfg.functions_source == "dir" and not cfg.functions_dir:
            log_event(log, "function_source_missing", logging.WARNING, message=NO_SOURCE,
                      profile=self.profile.name,
                      hint="the dev profile serves the shipped examples (blockx serve --profile dev)")
            return FunctionCodeNone(cfg.effective_function_snapshot_retention_ms(), now_ms=wall_ms())
        if cfg.functions_source == "redis":
            return await self._function_code_redis(cfg)
        if cfg.functions_source != "etcd":
            return FunctionCodeDirectory(cfg.functions_dir, cfg.effective_function_snapshot_retention_ms(),
                                         now_ms=wall_ms())
        fcode = FunctionCodeEtcd(self.etcd, cfg.functions_etcd_prefix,
                                 cfg.effective_function_snapshot_retention_ms(), now_ms=wall_ms())
        loaded = await fcode.start()
        log_event(log, "function_code_etcd", prefix=cfg.functions_etcd_prefix, loaded=loaded,
                  epoch=fcode.current_epoch(wall_ms()))
        return fcode

    async def _function_code_redis(self, cfg) -> FunctionCodeRedis:
        """FUNCTIONS_SOURCE=redis: read once here (waiting a few seconds for Redis), then
        followed by pub/sub with a periodic check of the epoch key."""
        fcode = FunctionCodeRedis(cfg.functions_redis_url, cfg.functions_redis_prefix,
                                  cfg.effective_function_snapshot_retention_ms(), now_ms=wall_ms(),
                                  check_interval_ms=cfg.functions_redis_check_interval_ms)
        loaded = await fcode.start()
        log_event(log, "function_code_redis", logging.INFO if loaded else logging.WARNING,
                  url=fcode.address, prefix=cfg.functions_redis_prefix, loaded=loaded,
                  epoch=fcode.current_epoch(wall_ms()),
                  **({} if loaded else {"message": f"Redis {fcode.address} not reachable yet: no functions "
                                                   "until it answers; the worker serves meanwhile"}))
        return fcode

    async def run(self) -> int:
        cfg, profile = self.cfg, self.profile
        loop = asyncio.get_running_loop()
        metrics = self.metrics = Metrics()
        if cfg.metrics_listen:
            port = metrics.start_http(cfg.metrics_listen)
            self.metrics_port = port
            log_event(log, "metrics_listening", addr=cfg.metrics_listen, port=port)
        dcfg = cfg.dispatcher_config()
        core = WorkerCore(cfg.core_config())
        disp = DispatcherCore(dcfg, random.random)
        fcode = await self._function_code(cfg)
        try:
            permissive = ensure_state_dir(cfg.data_plane.state_dir)     # 0700, before anything is written there
        except OSError as exc:     # only the data plane's default files need it; they fail on use
            permissive = f"STATE_DIR {cfg.data_plane.state_dir!r} cannot be created: {exc.strerror or exc}"
        if permissive:
            log_event(log, "state_dir_warning", logging.WARNING, message=permissive)
        data = DataPlane.from_config(cfg)
        io_factory = IOScopeFactory.from_config(cfg, data)
        # Executors attach with a secret the pool issues; a sandboxed one only sees its own socket.
        credentials = ExecutorCredentials()
        # EXECUTOR_PYTHON / EXECUTOR_SITE_PACKAGES: the functions' own packages, bound read-only.
        self.executor_env = ExecutorEnvironment(cfg.executor_python, cfg.executor_site_packages)
        if not (self.executor_env.own_python and not self.executor_env.site_packages):
            log_event(log, "executor_environment", environment=self.executor_env.describe())
        sandbox = executor_sandbox(cfg, self.executor_env.readonly_paths())
        self.adapter = ExecutorAdapter(cfg.socket_path,
                                       heartbeat_timeout_ms=cfg.effective_executor_heartbeat_timeout_ms(),
                                       executor_contexts=dcfg.executor_max_inflight, metrics=metrics,
                                       execute_call_batch=cfg.executor_call_batch, credentials=credentials,
                                       private_executor_ids=executor_ids(cfg.executor_count) if sandbox else ())
        self.executor_output = ExecutorOutput(line_bytes=cfg.executor_output_line_bytes,
                                              bytes_per_s=cfg.executor_output_bytes_per_s)
        self.pool = PoolManager(
            cfg.executor_count, cfg.socket_path, max_inflight=dcfg.executor_max_inflight,
            max_runnable=dcfg.executor_max_runnable, restart_enabled=cfg.executor_restart_enabled,
            restart_delay_ms=cfg.executor_restart_delay_ms, max_restarts=cfg.executor_max_restarts,
            restart_window_ms=cfg.executor_restart_window_ms, backoff_ms=cfg.executor_backoff_ms,
            extra_args=executor_args(cfg), metrics=metrics, sandbox=sandbox, credentials=credentials,
            run_as_user=executor_run_as_user(cfg.executor_spawn_mode, cfg.executor_user),
            output=self.executor_output, python=self.executor_env.python,
            extra_env=self.executor_env.extra_env(build_child_env()))
        shadow = None
        if cfg.shadow_submit_target_addr and cfg.shadow_submit_sample_rate > 0:
            shadow = ShadowForwarder(cfg.shadow_submit_target_addr, cfg.shadow_submit_sample_rate,
                                     tls=client_tls(cfg.shadow_tls_ca, cfg.shadow_tls_cert, cfg.shadow_tls_key),
                                     token=shadow_token(cfg))
        spans = await task_spans(cfg, profile)
        self.orch = Orchestrator(
            core=core, disp=disp, adapter=self.adapter, pool=self.pool, fcode=fcode,
            builders=BuilderRegistry.from_names(profile.builders, data=data),
            plugins=PluginRegistry.from_names(profile.plugins, data=data), io_factory=io_factory,
            admission=Admission.from_config(cfg.admission_config()), stream_cfg=cfg.stream_build,
            writer_stream=cfg.writer_stream,
            metrics=metrics, shadow=shadow, stall_timeout_ms=dcfg.effective_stall_timeout_ms,
            phase_io_timeout_ms=cfg.phase_io_timeout_ms, submit_linger_ms=cfg.submit_linger_ms,
            on_ready=self._on_ready,
            audit=self._audit_gate(metrics),
            traces=TraceStore(cfg.trace_max_events_per_task,
                              retained_max_events=cfg.trace_retained_max_events)
            if cfg.trace_enabled else None, spans=spans)
        metrics.executors_healthy_fn = self.adapter.healthy_count   # live at scrape time
        metrics.outbox_depth_fn = self.adapter.max_outbox_backlog
        # executors' RSS / CPU and the readiness flags, read at scrape time
        metrics.executor_usage_fn = self.adapter.resource_usage
        metrics.worker_draining_fn = lambda: core.draining
        self.memory_diagnostics = MemoryDiagnostics(core=core, disp=disp, fcode=fcode, adapter=self.adapter,
                                                    interval_ms=cfg.memory_diagnostics_interval_ms)
        self.tls = server_tls(cfg)
        self.auth = authenticator(cfg)
        status = WorkerStatusReader(core=core, adapter=self.adapter, metrics=metrics, pool=self.pool, fcode=fcode,
                                    started_at_ms=self.started_at_ms)
        budget = MemoryBudget.from_config(cfg.memory_budget_bytes)
        budget.start()
        metrics.memory_budget_fn = lambda: (budget.rss, budget.budget, budget.refusals)
        metrics.identity_holdings_fn = core.identity_holdings
        metrics.worker_ready_fn = status.ready      # as published: 0 while draining
        server, self.health, port = build_server(
            self.orch, listen_addr=cfg.grpc_listen_addr(), keepalive_time_ms=cfg.grpc_keepalive_time_ms,
            keepalive_timeout_ms=cfg.grpc_keepalive_timeout_ms, metrics=metrics,
            session_max_pending_events=cfg.session_max_pending_events,
            session_max_pending_bytes=cfg.session_max_pending_bytes, tls=self.tls, status=status,
            limits=GrpcLimits.from_config(cfg), auth=self.auth, budget=budget)
        await set_health(self.health, False)
        self.worker_addr = cfg.resolved_worker_addr(port)
        self.publisher = EtcdPublisher(
            self.etcd, cfg.worker_registry_prefix, self.worker_addr, self._heartbeat,
            interval_ms=cfg.heartbeat_interval_ms, metrics=metrics)
        status.publisher, status.worker_addr = self.publisher, self.worker_addr

        if self.orch.actor.audit is not None and self.orch.actor.audit.etcd is not None:
            await self.orch.actor.audit.etcd.fetch()          # approvals in place before the first dispatch
        await self.adapter.start()
        await self.pool.start()
        ticker = loop.create_task(self._ticker())
        memdiag = loop.create_task(self.memory_diagnostics.run())
        await server.start()
        own_dashboard = None              # the Worker's own dashboard pages: DASHBOARD_LISTEN, off by default
        if cfg.dashboard_listen:
            from blockx.dashboard.own import start_own_dashboard
            own_dashboard = await start_own_dashboard(cfg, self.worker_addr, self.auth)
        await set_alive(self.health)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        if self.tls is not None or self.auth.tokens is not None:
            loop.add_signal_handler(signal.SIGHUP, self._on_sighup)
        log_event(log, "worker_serving", listen=cfg.listen_addr, port=port, worker_addr=self.worker_addr,
                  executors=cfg.executor_count, spawn_mode=cfg.executor_spawn_mode,
                  task_slots=cfg.worker.task_slots, identity_slot_share=core.identity_slot_share,
                  memory_budget=budget.budget, memory_budget_from=budget.source, pid=os.getpid(),
                  socket=cfg.socket_path, etcd=cfg.etcd_endpoints if cfg.etcd_enabled else "disabled",
                  tls="off" if self.tls is None else ("mutual" if self.tls.mutual else "on"),
                  auth=self.auth.mode,
                  auth_tokens=self.auth.tokens.path if self.auth.tokens is not None else "")
        # What a killed Worker's bundle writers left, swept beside serving.
        bundle_sweep = BundleSweep(data.bundle_root)
        bundle_sweep.start()
        idle_sources = IdleSources(data, cfg.data_plane.duckdb_idle_close_ms)
        idle_sources.start()
        warn_if_open(self.auth.mode, cfg.grpc_listen_addr(), self.tls is not None)
        warn_if_cleartext_tokens(self.auth.mode, cfg.grpc_listen_addr(), self.tls is not None)

        # Everything built so far lives until exit: keep it out of every future
        # collection, and collect the young generation less often. A queued call
        # is a handful of objects, so with the default threshold (700) a 100k-call
        # task triggers hundreds of collections that each rescan live calls. No
        # refused request waits for the collector (adapters/grpc/server.py breaks the abort
        # cycle; the call gate never reads an unauthenticated one), so the
        # threshold does not decide what a flood of them costs: 300 refused 8 MiB
        # requests (tests/e2e/test_hostile_load.py) left +16 MB at 700 and +11 MB
        # at 20,000; with the cycle in place they left +1.7 GB at 20,000.
        gc.collect()
        gc.freeze()
        gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])

        await self._stop.wait()
        # ---- phase 1: drain ----
        t0 = time.monotonic()
        self.systemd.stopping(f"draining: {core.active_task_count()} tasks, up to {cfg.drain_timeout_ms} ms")
        self.orch.set_draining()
        await set_health(self.health, False)
        await self.publisher.deregister()
        drain = loop.create_task(self.orch.wait_drain(cfg.drain_timeout_ms / 1000.0))
        force = loop.create_task(self._force.wait())
        await asyncio.wait({drain, force}, return_when=asyncio.FIRST_COMPLETED)
        drained = drain.done() and drain.result()
        for t in (drain, force):
            t.cancel()
        log_event(log, "drain_finished", drained=bool(drained), active_tasks=core.active_task_count(),
                  seconds=round(time.monotonic() - t0, 3))
        # ---- phase 2: force (in this order: lifecycle, pool, executor
        # adapter, IO scopes, Watch streams, gRPC) ----
        await self.publisher.stop()
        if isinstance(fcode, (FunctionCodeEtcd, FunctionCodeRedis)):
            await fcode.stop()
        ticker.cancel()
        memdiag.cancel()
        await bundle_sweep.stop()
        await idle_sources.stop()
        unfinished = self.orch.end_unfinished_tasks()    # their watchers get a terminal update
        log_event(log, "shutdown_step", step="tasks_ended", unfinished_tasks=unfinished)
        self.adapter.stopping()        # the executors' connections end on purpose from here
        await self.pool.stop()
        self.executor_env.close()
        log_event(log, "shutdown_step", step="executor_pool_stopped")
        await self.adapter.close()
        await self.orch.close()
        log_event(log, "shutdown_step", step="executor_adapter_closed")
        await io_factory.aclose()
        if self.orch.actor.audit is not None and self.orch.actor.audit.etcd is not None:
            await self.orch.actor.audit.etcd.close()
        await data.aclose()
        log_event(log, "shutdown_step", step="io_scopes_closed")
        self.orch.close_watches()
        log_event(log, "shutdown_step", step="watch_streams_closed")
        if shadow is not None:
            await shadow.close()
        if own_dashboard is not None:
            await own_dashboard.stop()
        await server.stop(GRPC_STOP_GRACE_S)
        budget.stop()
        if spans is not None:       # the exporter process flushes the spans it holds, then exits
            await spans.sink.close()
        metrics.stop_http()
        log_event(log, "worker_stopped", seconds=round(time.monotonic() - t0, 3))
        return 0
