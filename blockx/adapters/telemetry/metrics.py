"""Prometheus metrics for the Worker, in a registry of its own.

Theory of operation: the hot path (dispatching and completing calls, UDS frames)
runs hundreds of thousands of times a second on the one event loop, so it never
calls into prometheus_client. It bumps plain int attributes
(`metrics.calls_dispatched += n`) or `collections.Counter` entries
(`metrics.calls_failed[kind] += 1`), and a custom Collector turns them into metric
families only when /metrics is scraped. Gauges are either attributes the owner
sets or zero-argument callbacks read at scrape time (`slots_fn`, `outbox_depth_fn`,
`executors_healthy_fn`). The latency histograms (task phases, tasks, unary
RPCs, calls per function) bump plain int buckets too and become histogram
families at scrape time (seconds_histogram.py, latency_metrics.py).

Scrapes run on prometheus_client's HTTP thread. Reads of ints are atomic under
the GIL, labelled counters are copied with `dict(...)` (a single C-level copy)
before iterating, and a failing callback only drops its own family, so a scrape
never disturbs or crashes the loop.

The HTTP endpoint binds exactly the configured address (`127.0.0.1:9464` by
default); prometheus_client would otherwise listen on 0.0.0.0.

Labels. `direction`, `phase`, `method`, `code`, `state` (slots, etcd) take values
from the Worker's own code. The labels whose values an executor or a task can
choose go through blockx.adapters.telemetry.metric_labels.LabelValues when counted (or, for
gauges read at scrape time, when exported): `error_kind` (user code picks it),
`failure_code` and the task `state`, `executor` (an executor names itself),
`limit` and `identity` (a token's name or a certificate's subject: at most
IDENTITY_LABELS distinct values, the rest `other`). A value outside the allowed charset or length, or past the cap of
distinct values, is counted as `other`, so no executor can make unbounded series.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, start_http_server
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from blockx.adapters.executor.counters import ATTACH_REFUSAL_KINDS
from blockx.adapters.telemetry.latency_metrics import CallLatency
from blockx.adapters.telemetry.metric_labels import OTHER, LabelValues
from blockx.adapters.telemetry.seconds_histogram import SecondsHistogram
from blockx.core import failure_codes
from blockx.protocol import messages as _msg

__all__ = [
    "CONTENT_TYPE_LATEST",
    "OTHER",
    "ETCD_STATES",
    "Metrics",
    "PHASE_BUCKETS",
    "SLOT_STATES",
    "parse_listen_addr",
]

log = logging.getLogger("blockx.metrics")

SLOT_STATES = ("free", "allocated", "running")
IDENTITY_LABELS = 64                    # distinct identities with their own series; the rest are "other"
SHARES = ("slots", "queued_call_bytes", "task_sessions", "watch_streams")
_NO_SLOTS = dict.fromkeys(SLOT_STATES, 0)   # until slots_fn (WorkerCore's counts) is wired
ETCD_STATES = ("idle", "disabled", "registering", "registered", "retrying", "deregistered")
# The error kinds and task outcomes the Worker, its cores and the SDK produce
# themselves: always their own series, whatever else executors send.
KNOWN_ERROR_KINDS = (*_msg.DEFAULT_RETRYABLE, _msg.IO_ERROR, _msg.SUBCALL_FAILED, "AUDIT_REJECTED", "ABORTED")
KNOWN_TASK_STATES = ("SUCCEEDED", "FAILED")
# Task phases last from a millisecond (a cached callList) to hours (MaxTaskTimeoutMs 8h).
# Unary RPCs answer in well under a millisecond to a few (a big result).
GRPC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
PHASE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 28800.0)


def parse_listen_addr(addr: str) -> tuple[str, int]:
    """'127.0.0.1:9464' / '[::1]:9464' / ':9464' -> (host, port).

    An empty host (Go's ':9464') means every interface, written out as 0.0.0.0 so
    that the choice is explicit.
    """
    if not isinstance(addr, str) or ":" not in addr:
        raise ValueError(f"metrics address {addr!r} must be HOST:PORT, e.g. 127.0.0.1:9464")
    host, _, port_s = addr.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_s)
    except ValueError:
        raise ValueError(f"metrics address {addr!r}: port {port_s!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"metrics address {addr!r}: port {port} out of range 0..65535")
    return host or "0.0.0.0", port


class Metrics:
    """All Worker metrics. Bump the attributes; `render()` or /metrics exports them."""

    def __init__(self, *, process_metrics: bool = True) -> None:
        self.registry = CollectorRegistry(auto_describe=True)

        # ---- plain counters (monotonic; owners only ever add) ----
        self.tasks_submitted = 0
        self.calls_dispatched = 0
        self.calls_completed = 0
        self.calls_retried = 0
        self.call_cache_hits = 0
        self.singleflight_waiters = 0
        self.executor_restarts = 0
        self.executor_wedge_kills = 0
        self.executor_limit_kills: dict[str, int] = {}   # sandbox limit ("memory limit") -> kills
        self.executor_attach_refused: dict[str, int] = {}  # ATTACH_REFUSAL_KINDS -> refused attaches
        self.executor_frames_refused = 0
        self.audit_rejections = 0
        self.executor_heartbeat_timeouts = 0
        self.uds_frames_in = 0
        self.uds_frames_out = 0
        self.uds_bytes_in = 0
        self.uds_bytes_out = 0
        self.etcd_publishes = 0
        self.etcd_registrations = 0
        self.etcd_errors = 0

        # ---- labelled counters ----
        self.calls_failed: Counter[str] = Counter()                   # error_kind
        self.tasks_terminal: Counter[tuple[str, str]] = Counter()     # (state, failure_code)
        self.grpc_requests: Counter[tuple[str, str]] = Counter()      # (method, code)
        # The values executors and tasks may put in a label (see the module docstring).
        self.error_kind_label = LabelValues("error_kind", KNOWN_ERROR_KINDS)
        self.task_state_label = LabelValues("state", KNOWN_TASK_STATES)
        self.failure_code_label = LabelValues("failure_code", ("", *sorted(failure_codes.ALL)))
        self.executor_label = LabelValues("executor", max_values=256)
        self.limit_label = LabelValues("limit", ("memory",))
        self.attach_refusal_label = LabelValues("reason", ATTACH_REFUSAL_KINDS)
        self.identity_label = LabelValues("identity", max_values=IDENTITY_LABELS, extra_chars="@=")
        self.share_refusals: Counter[tuple[str, str]] = Counter()     # (identity label, share): fair shares

        # ---- gauges: a value the owner sets, or a callback read at scrape time ----
        self.slots_fn: Callable[[], Mapping[str, int]] | None = None
        self.executors_healthy = 0
        self.executors_healthy_fn: Callable[[], int] | None = None
        self.outbox_depth = 0
        self.outbox_depth_fn: Callable[[], int] | None = None
        self.etcd_state = "idle"
        self.calls_queued = 0            # root calls READY for an executor (set by the orchestrator's tick)
        # Fair shares: identity -> (slots, queued call bytes) (WorkerCore.identity_holdings);
        # (kind, identity) -> open streams; (resident bytes, budget bytes, refusals) of the memory budget.
        self.identity_holdings_fn: Callable[[], Mapping[str, tuple[int, int]]] | None = None
        self.identity_streams_fn: Callable[[], Mapping[tuple[str, str], int]] | None = None
        self.memory_budget_fn: Callable[[], tuple[int, int, int]] | None = None

        # ---- latency (blockx.adapters.telemetry.latency_metrics): calls per function, tasks, unary RPCs ----
        self.call_latency = CallLatency()

        # ---- executor resources and readiness ----
        # executor_usage_fn: ExecutorAdapter.resource_usage, read at scrape time
        # -> [(executor_id, memory_bytes, cpu_user_ms, cpu_system_ms)]; an executor
        # that is not attached has no series. worker_ready_fn / worker_draining_fn:
        # what the etcd heartbeat publishes (WorkerStatusReader.ready; WorkerCore.draining).
        self.executor_usage_fn: Callable[[], Iterable[tuple[str, int, int, int]]] | None = None
        self.worker_ready_fn: Callable[[], bool] | None = None
        self.worker_draining_fn: Callable[[], bool] | None = None
        # ---- end executor resources and readiness ----

        # Observed per task phase, per task and per unary RPC: plain buckets (seconds_histogram.py).
        self.phase_seconds = SecondsHistogram(
            "blockx_task_phase_duration_seconds",
            "Wall time a task spent in each phase (builder, calls, plugin) and in total.",
            "phase", PHASE_BUCKETS)
        self.task_seconds = SecondsHistogram(
            "blockx_task_duration_seconds",
            "End-to-end time of a task, from SubmitTask accepting it to its terminal state, by state.",
            "state", PHASE_BUCKETS)
        self._task_state_values: dict[str, str] = {}     # state -> its label value (task_state_label)
        self.grpc_seconds = SecondsHistogram(
            "blockx_grpc_request_duration_seconds",
            "Time the Worker spent on a unary RPC (streams excluded: their lifetime is the client's), by method.",
            "method", GRPC_BUCKETS)
        self.registry.register(_WorkerCollector(self))
        if process_metrics:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)

        self._http_server: Any = None      # wsgiref's WSGIServer, while serving
        self._http_thread: threading.Thread | None = None

    # ---- convenience for less-hot paths ----
    def task_terminal(self, state: str, failure_code: str = "") -> None:
        self.tasks_terminal[(self.task_state_label(state), self.failure_code_label(failure_code or ""))] += 1

    def call_failed(self, error_kind: str, n: int = 1) -> None:
        self.calls_failed[self.error_kind_label(error_kind)] += n

    def grpc_request(self, method: str, code: str) -> None:
        self.grpc_requests[(method, code)] += 1

    def share_refused(self, identity: str, share: str) -> None:
        """A request refused because ``identity`` holds its whole ``share`` (one of SHARES)."""
        self.share_refusals[(self.identity_label(identity), share)] += 1

    def observe_phase(self, phase: str, seconds: float) -> None:
        self.phase_seconds.observe(phase, seconds)

    def observe_task(self, state: str, seconds: float) -> None:
        label = self._task_state_values.get(state)
        if label is None:
            label = self.task_state_label(state)
            if len(self._task_state_values) < 64:
                self._task_state_values[state] = label
        self.task_seconds.observe(label, seconds)

    def observe_grpc(self, method: str, seconds: float) -> None:
        """``method``: a WorkerService method name (the server's own, so the label is bounded)."""
        self.grpc_seconds.observe(method, seconds)

    def set_etcd_state(self, state: str) -> None:
        if state not in ETCD_STATES:
            raise ValueError(f"unknown etcd registration state {state!r}")
        self.etcd_state = state

    # ---- exposition ----
    def render(self) -> bytes:
        """The Prometheus text exposition of everything (what /metrics serves)."""
        return generate_latest(self.registry)

    def start_http(self, addr: str = "127.0.0.1:9464") -> int:
        """Serve /metrics on exactly `addr` from a daemon thread; returns the bound port."""
        if self._http_server is not None:
            raise RuntimeError("metrics HTTP server already started")
        host, port = parse_listen_addr(addr)
        try:
            server, thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot serve metrics on {addr}: {exc.strerror or exc}") from exc
        self._http_server, self._http_thread = server, thread
        return server.server_port

    @property
    def http_port(self) -> int | None:
        return self._http_server.server_port if self._http_server is not None else None

    def stop_http(self, timeout: float = 5.0) -> None:
        server, thread = self._http_server, self._http_thread
        self._http_server = self._http_thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout)


def _identity_sums(items: Iterable[tuple[tuple[str, ...], int]], label: LabelValues) -> dict[tuple[str, ...], int]:
    """Sums by (identity label, *rest): the identities past the label's cap summed into OTHER.
    The unrestricted caller ("") has no share and no series."""
    out: dict[tuple[str, ...], int] = {}
    for (identity, *rest), n in items:
        if identity:
            key = (label(identity), *rest)
            out[key] = out.get(key, 0) + n
    return out


def _snapshot(counter: Mapping) -> dict:
    # dict(Counter) is one C-level copy under the GIL: safe against the loop
    # thread inserting a new key mid-scrape, unlike iterating the live object.
    for _ in range(3):
        try:
            return dict(counter)
        except RuntimeError:
            continue
    return {}


class _WorkerCollector(Collector):
    def __init__(self, m: Metrics) -> None:
        self._m = m

    def describe(self) -> Iterable[Metric]:
        # Declaring names lets the registry reject clashes at registration time
        # without running the callbacks.
        return list(self._families(describe_only=True))

    def collect(self) -> Iterable[Metric]:
        return list(self._families(describe_only=False))

    def _share_families(self, describe_only: bool) -> Iterable[Metric]:
        """Fair shares per identity (core.worker.shares, open_streams) and the memory budget."""
        m = self._m
        label = m.identity_label
        held = GaugeMetricFamily("blockx_identity_slots", "Task slots an identity holds (reserved or running).",
                                 labels=["identity"])
        nbytes = GaugeMetricFamily("blockx_identity_queued_call_bytes",
                                   "Payload bytes of an identity's tasks that have not ended.", labels=["identity"])
        streams = GaugeMetricFamily("blockx_identity_streams", "TaskSession / WatchTasks streams an identity has open.",
                                    labels=["identity", "kind"])
        refused = CounterMetricFamily("blockx_share_refusals",
                                      "Requests refused because the identity held its whole share, by share.",
                                      labels=["identity", "share"])
        budget = GaugeMetricFamily("blockx_memory_budget_bytes",
                                   "Resident memory past which new work is refused (memoryBudgetBytes); 0 = off.")
        budget_refused = CounterMetricFamily("blockx_memory_budget_refusals",
                                             "New work refused because the worker was over its memory budget.")
        if not describe_only:
            holdings = _read(m.identity_holdings_fn, {}, "identity_holdings_fn") or {}
            items = list(holdings.items())
            for (who,), n in sorted(_identity_sums((((o,), v[0]) for o, v in items), label).items()):
                held.add_metric([who], n)
            for (who,), n in sorted(_identity_sums((((o,), v[1]) for o, v in items), label).items()):
                nbytes.add_metric([who], n)
            open_ = _read(m.identity_streams_fn, {}, "identity_streams_fn") or {}
            pairs = (((who, kind), n) for (kind, who), n in open_.items())
            for (who, kind), n in sorted(_identity_sums(pairs, label).items()):
                streams.add_metric([who, kind], n)
            for (who, share), n in sorted(_snapshot(m.share_refusals).items()):
                refused.add_metric([who, share], n)
            mem = _read(m.memory_budget_fn, (0, 0, 0), "memory_budget_fn") or (0, 0, 0)
            budget.add_metric([], mem[1])
            budget_refused.add_metric([], mem[2])
        yield held
        yield nbytes
        yield streams
        yield refused
        yield budget
        yield budget_refused

    def _families(self, *, describe_only: bool) -> Iterable[Metric]:
        m = self._m

        def counter(name: str, doc: str, value: int) -> Metric:
            return CounterMetricFamily(name, doc, value=value)

        yield counter("blockx_tasks_submitted", "Tasks accepted by SubmitTask (new, not idempotent repeats).", m.tasks_submitted)
        yield counter("blockx_calls_dispatched", "Calls sent to an executor (ExecuteCall), retries included.", m.calls_dispatched)
        yield counter("blockx_calls_completed", "Calls that completed successfully.", m.calls_completed)
        yield counter("blockx_calls_retried", "Call attempts re-queued after a retryable failure.", m.calls_retried)
        yield counter("blockx_call_cache_hits", "Calls answered from the call cache without dispatch.", m.call_cache_hits)
        yield counter("blockx_singleflight_waiters", "Calls that joined an identical in-flight call instead of dispatching.", m.singleflight_waiters)
        yield counter("blockx_executor_restarts", "Executor processes restarted by the pool manager.", m.executor_restarts)
        yield counter("blockx_executor_wedge_kills", "Executors killed by the wedge backstop.", m.executor_wedge_kills)
        yield counter("blockx_executor_heartbeat_timeouts", "Executors declared lost after missing heartbeats.", m.executor_heartbeat_timeouts)
        yield counter("blockx_etcd_publishes", "Heartbeats written to etcd.", m.etcd_publishes)
        yield counter("blockx_etcd_registrations", "Successful etcd registrations (lease granted and key written).", m.etcd_registrations)
        yield counter("blockx_etcd_errors", "Failed etcd operations (registration, refresh, publish, deregister).", m.etcd_errors)

        frames = CounterMetricFamily("blockx_uds_frames", "Frames on executor Unix sockets.", labels=["direction"])
        frames.add_metric(["in"], m.uds_frames_in)
        frames.add_metric(["out"], m.uds_frames_out)
        yield frames
        nbytes = CounterMetricFamily("blockx_uds_bytes", "Bytes on executor Unix sockets.", labels=["direction"])
        nbytes.add_metric(["in"], m.uds_bytes_in)
        nbytes.add_metric(["out"], m.uds_bytes_out)
        yield nbytes

        failed = CounterMetricFamily("blockx_calls_failed", "Call attempts that failed, by errorKind.", labels=["error_kind"])
        terminal = CounterMetricFamily("blockx_tasks_terminal", "Tasks that reached a terminal state.", labels=["state", "failure_code"])
        grpc_req = CounterMetricFamily("blockx_grpc_requests", "gRPC requests handled, by method and status code.", labels=["method", "code"])
        if not describe_only:
            for kind, n in sorted(_snapshot(m.calls_failed).items()):
                failed.add_metric([str(kind)], n)
            for (state, code), n in sorted(_snapshot(m.tasks_terminal).items()):
                terminal.add_metric([str(state), str(code)], n)
            for (method, code), n in sorted(_snapshot(m.grpc_requests).items()):
                grpc_req.add_metric([str(method), str(code)], n)
        yield failed
        yield terminal
        yield grpc_req

        limits = CounterMetricFamily("blockx_executor_limit_kills",
                                     "Sandboxed executors killed by a resource limit, by limit.", labels=["limit"])
        if not describe_only:
            for limit, n in sorted(_bounded(_snapshot(m.executor_limit_kills).items(), m.limit_label).items()):
                limits.add_metric([limit], n)
        yield limits
        yield counter("blockx_audit_rejections", "Calls refused by the audit gate (AUDIT_MODE=enforce).",
                      0 if describe_only else m.audit_rejections)
        attach = CounterMetricFamily("blockx_executor_attach_refused",
                                     "Executor connections refused at attach, by reason.", labels=["reason"])
        if not describe_only:
            for reason, n in sorted(_bounded(_snapshot(m.executor_attach_refused).items(),
                                             m.attach_refusal_label).items()):
                attach.add_metric([reason], n)
        yield attach
        yield counter("blockx_executor_frames_refused",
                      "Executor frames about a call not dispatched to that executor, dropped.",
                      0 if describe_only else m.executor_frames_refused)

        yield from self._share_families(describe_only)

        slots = GaugeMetricFamily("blockx_slots", "Task slots by state.", labels=["state"])
        if not describe_only:
            values = _read(m.slots_fn, _NO_SLOTS, "slots_fn")
            if values is not None:
                for state in SLOT_STATES:
                    slots.add_metric([state], values.get(state, 0))
        yield slots

        for name, doc, fn, value, attr in (
            ("blockx_executors_healthy", "Executors attached and healthy.", m.executors_healthy_fn, m.executors_healthy, "executors_healthy_fn"),
            ("blockx_outbox_depth", "Largest executor outbox backlog (frames) across connections.", m.outbox_depth_fn, m.outbox_depth, "outbox_depth_fn"),
            ("blockx_calls_queued", "Root calls ready and waiting for an executor, across tasks (every 500 ms).",
             None, m.calls_queued, "calls_queued"),
        ):
            g = GaugeMetricFamily(name, doc)
            if not describe_only:
                v = _read(fn, value, attr)
                if v is not None:
                    g.add_metric([], v)
            yield g

        yield m.call_latency.family(describe_only)
        yield m.phase_seconds.family(describe_only)
        yield m.task_seconds.family(describe_only)
        yield m.grpc_seconds.family(describe_only)
        yield from _executor_families(m, describe_only)
        for name, doc, fn, attr in (
            ("blockx_worker_ready", "1 while the Worker is ready (an executor healthy, not draining), as published "
             "to etcd.",
             m.worker_ready_fn, "worker_ready_fn"),
            ("blockx_worker_draining", "1 while the Worker drains (shutdown requested).",
             m.worker_draining_fn, "worker_draining_fn"),
        ):
            g = GaugeMetricFamily(name, doc)
            if not describe_only:
                v = _read(fn, False, attr)
                if v is not None:
                    g.add_metric([], 1.0 if v else 0.0)
            yield g

        etcd = GaugeMetricFamily("blockx_etcd_registration_state",
                                 "etcd registration state: 1 for the current state, 0 for the others.",
                                 labels=["state"])
        for state in ETCD_STATES:
            etcd.add_metric([state], 1.0 if m.etcd_state == state else 0.0)
        yield etcd


# ---- executor resources ----
def _executor_families(m: Metrics, describe_only: bool) -> Iterable[Metric]:
    """blockx_executor_memory_bytes{executor} and
    blockx_executor_cpu_seconds_total{executor,mode}, from each attached
    executor's latest Heartbeat (memoryBytes, cpuUserMs, cpuSystemMs).

    The CPU counter is the executor PROCESS's own CPU time (os.times() in the
    executor), like process_cpu_seconds_total: a restarted executor keeps its id
    and starts again near 0, which Prometheus reads as a counter reset, so
    rate() / increase() stay right across restarts. An executor that is lost or
    removed from the pool has no series until one with its id attaches again."""
    mem = GaugeMetricFamily("blockx_executor_memory_bytes",
                            "Executor resident set size (bytes), from its latest heartbeat.", labels=["executor"])
    cpu = CounterMetricFamily("blockx_executor_cpu_seconds",
                              "CPU time of the executor process, from its latest heartbeat; "
                              "resets when the executor restarts.", labels=["executor", "mode"])
    if not describe_only:
        usage = _read(m.executor_usage_fn, (), "executor_usage_fn")
        # An executor id that cannot be a label joins the `other` series (summed).
        rows: dict[str, list[float]] = {}
        for eid, mem_bytes, user_ms, system_ms in usage or ():
            row = rows.setdefault(m.executor_label(eid), [0, 0, 0])
            row[0] += mem_bytes
            row[1] += user_ms
            row[2] += system_ms
        for eid, (mem_bytes, user_ms, system_ms) in sorted(rows.items()):
            mem.add_metric([eid], mem_bytes)
            cpu.add_metric([eid, "user"], user_ms / 1000.0)
            cpu.add_metric([eid, "system"], system_ms / 1000.0)
    yield mem
    yield cpu
# ---- end executor resources ----


def _bounded(items: Iterable[tuple[Any, int]], label: LabelValues) -> dict[str, int]:
    """Counts by label value, the values a LabelValues refuses summed into OTHER."""
    out: dict[str, int] = {}
    for value, n in items:
        key = label(value)
        out[key] = out.get(key, 0) + n
    return out


_reported_failures: set[str] = set()


def _read(fn: Callable[[], Any] | None, fallback: Any, what: str) -> Any:
    if fn is None:
        return fallback
    try:
        return fn()
    except Exception:  # noqa: BLE001 - a broken callback drops its sample, not the scrape
        # Traceback once per callback; later scrapes would only repeat it.
        first = what not in _reported_failures
        _reported_failures.add(what)
        log.log(logging.WARNING if first else logging.DEBUG,
                "metrics callback %s failed; its sample is omitted", what, exc_info=first)
        return None
