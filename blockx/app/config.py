"""WorkerFullConfig: every knob of a running Worker, and how it is loaded.

Load order (spec, Worker > Configuration): built-in defaults -> the Profile's
registry prefix and `tune_defaults` -> the JSON file named by WORKER_CONFIG (only the
keys present override; unknown keys and wrong JSON types are errors) -> environment
variables. A value written explicitly in the file or the environment always wins,
which is also how an operator rolls back a profile default.

Every field declares its JSON name (the spec's camelCase path) and, where the spec
has one, its environment variable, so loading, `to_dict()` (`blockx serve
--print-config`) and the error messages all speak the names an operator types.
Loading collects every bad key / value before failing; `violations()` collects
every broken constraint. Both report all problems at once, so a bad deployment is
fixed in one round instead of one error per restart."""

from __future__ import annotations

import difflib
import ipaddress
import json
import logging
import math
import os
import socket
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints

from blockx.app.duration import DurationError, parse_duration_ms
from blockx.json_types import json_type as _json_type
from blockx.core.config import MAX_RETRY_JITTER_PERCENT, SNAPSHOT_RETENTION_SLACK_MS
from blockx.core.dispatcher_config import MAX_FAIRNESS_QUANTUM, derive_stall_timeout_ms

if TYPE_CHECKING:
    from blockx.app.profile import Profile

MiB = 1024 * 1024
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
# Linux sun_path is 108 bytes including the terminating NUL.
UDS_PATH_MAX = 107
# The etcd lease the Worker keeps alive with its heartbeats (spec: TTL 10 s).
ETCD_LEASE_TTL_MS = 10_000
# The executor heartbeat timeout, once coupled to the stall backstop, is stall + this.
STALL_DERIVED_MARGIN_MS = 5_000
SPAWN_MODES_SUPPORTED = ("process",)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL")
BLOCK_REGISTRY_SEGMENT = "workers"
BUNDLE_REGISTRY_SEGMENT = "bundle-workers"

_TRUE = {"1", "t", "true", "yes", "y", "on"}
_FALSE = {"0", "f", "false", "no", "n", "off"}


class ConfigError(ValueError):
    """One or more configuration problems; `problems` lists each one."""

    def __init__(self, problems: list[str] | str, header: str = "invalid worker configuration"):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.header = header
        super().__init__(self.render())

    def render(self) -> str:
        if len(self.problems) == 1:
            return f"{self.header}: {self.problems[0]}"
        return f"{self.header} ({len(self.problems)} problems):\n" + "\n".join(
            f"  - {p}" for p in self.problems)


def default_functions_dir() -> str:
    """The example functions shipped inside the package, so a new user can run a
    task at once."""
    return str(Path(__file__).resolve().parent.parent / "examples" / "functions")


def default_socket_path() -> str:
    """A per-process socket path inside a per-user directory.

    $XDG_RUNTIME_DIR is already private to the user (mode 0700, tmpfs); /tmp is
    not, so the directory under it is created 0700 and checked by
    `prepare_socket_dir` before the listener binds."""
    base = os.environ.get("XDG_RUNTIME_DIR", "")
    if not base or not os.path.isdir(base):
        base = tempfile.gettempdir()
    return os.path.join(base, f"blockx-{os.getuid()}", f"worker-{os.getpid()}.sock")


def _f(default: Any = MISSING, *, env: str | None = None, json_name: str | None = None,
       default_factory: Any = MISSING, env_kind: str | None = None, doc: str = ""):
    md = {"env": env, "json": json_name, "env_kind": env_kind, "doc": doc}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=md)
    return field(default=default, metadata=md)


@dataclass
class WorkerSection:
    task_slots: int = _f(50, env="TASK_SLOTS", doc="slot pool size")
    default_ttl_ms: int = _f(5000, json_name="defaultTTLMs", doc="TTL of inline reservations")
    task_deadline_ms: int = _f(300_000, env="TASK_DEADLINE_MS", doc="default task timeout")
    max_task_timeout_ms: int = _f(28_800_000, env="MAX_TASK_TIMEOUT_MS", doc="cap of task_timeout_ms")
    result_retention_ms: int = _f(300_000, env="RESULT_RETENTION_MS")
    watch_disconnect_grace_ms: int = _f(0, env="WATCH_DISCONNECT_GRACE_MS", doc="0 disables")
    default_max_attempts: int = _f(3, env="CALL_RETRY_MAX_ATTEMPTS")
    default_base_backoff_ms: int = _f(10, env="CALL_RETRY_BASE_BACKOFF_MS")
    default_retry_jitter_percent: int = _f(5, env="CALL_RETRY_JITTER_PERCENT")


@dataclass
class AdmissionSection:
    builder_slots: int = _f(16)
    executor_task_slots: int = _f(32, env="EXECUTOR_TASK_SLOTS")
    plugin_slots: int = _f(16)
    scan_slots: int = _f(8, env="SCAN_SLOTS")


@dataclass
class StreamBuildSection:
    enabled: bool = _f(False, env="STREAM_BUILD_ENABLED")
    max_outstanding_batches: int = _f(2)
    batch_max_rows: int = _f(8192)
    batch_max_args_bytes: int = _f(32 * MiB)


@dataclass
class DispatcherSection:
    executor_max_inflight: int = _f(128)
    executor_max_runnable: int = _f(128)
    executor_selection_sample_size: int = _f(0, env="EXECUTOR_SELECTION_SAMPLE_SIZE")
    executor_memory_high_watermark: int = _f(0, doc="executor RSS bytes; 0 disables")
    task_max_inflight_calls: int = _f(1024)
    call_deadline_ms: int = _f(5000, env="CALL_DEADLINE_MS", doc="budget per root-call attempt; 0 = unlimited")
    scheduler_stall_timeout_ms: int = _f(0, env="SCHEDULER_STALL_TIMEOUT_MS", doc="0 = derived")
    max_subcall_depth: int = _f(8)
    base_backoff_ms: int = _f(10)
    max_backoff_ms: int = _f(60_000, doc="cap on one retry delay before jitter; 0 = no cap")
    instance_fairness: bool = _f(False, env="DISPATCH_INSTANCE_FAIRNESS")
    instance_fairness_quantum: int = _f(0, env="DISPATCH_INSTANCE_FAIRNESS_QUANTUM")
    max_collected_output_bytes: int = _f(0, env="MAX_COLLECTED_OUTPUT_BYTES", doc="0 = unlimited")


@dataclass
class IOBackendSection:
    enabled: bool = _f(True)
    concurrency: int = _f(64, doc="requests served at once across all tasks")


@dataclass
class IOBackendsSection:
    devstub: IOBackendSection = _f(default_factory=IOBackendSection)


@dataclass
class WorkerFullConfig:
    listen_addr: str = _f(":8081", env="WORKER_LISTEN")
    worker_addr: str = _f("", env="WORKER_ADDR", doc="empty: listen port + outbound IP")
    etcd_endpoints: list[str] = _f(default_factory=lambda: ["localhost:2379"], env="ETCD_ENDPOINTS",
                                   doc='"none" or empty skips registration')
    worker_registry_prefix: str = _f("", env="WORKER_REGISTRY_PREFIX", doc="from the profile")
    executor_count: int = _f(8, env="EXECUTOR_COUNT")
    executor_spawn_mode: str = _f("process", env="EXECUTOR_SPAWN_MODE")
    worker: WorkerSection = _f(default_factory=WorkerSection)
    admission: AdmissionSection = _f(default_factory=AdmissionSection)
    stream_build: StreamBuildSection = _f(default_factory=StreamBuildSection)
    dispatcher: DispatcherSection = _f(default_factory=DispatcherSection)
    heartbeat_interval_ms: int = _f(200, env="WORKER_HEARTBEAT_INTERVAL", env_kind="duration")
    drain_timeout_ms: int = _f(30_000, env="DRAIN_TIMEOUT_MS")
    phase_io_timeout_ms: int = _f(10_000, env="PHASE_IO_TIMEOUT_MS")
    grpc_keepalive_time_ms: int = _f(30_000, env="WORKER_GRPC_KEEPALIVE_TIME_MS")
    grpc_keepalive_timeout_ms: int = _f(10_000, env="WORKER_GRPC_KEEPALIVE_TIMEOUT_MS")
    executor_restart_enabled: bool = _f(True, env="EXECUTOR_RESTART_ENABLED")
    executor_restart_delay_ms: int = _f(1000)
    executor_max_restarts: int = _f(10)
    executor_restart_window_ms: int = _f(60_000)
    executor_backoff_ms: int = _f(30_000)
    executor_heartbeat_timeout_ms: int = _f(10_000)
    function_snapshot_retention_ms: int = _f(0, env="FUNCTION_SNAPSHOT_RETENTION_MS",
                                             doc="0 = maxTaskTimeoutMs + 10s")
    functions_dir: str = _f(default_factory=default_functions_dir, env="FUNCTIONS_DIR")
    socket_path: str = _f(default_factory=default_socket_path, env="EXECUTOR_SOCKET_PATH")
    metrics_listen: str = _f("127.0.0.1:9464", env="METRICS_LISTEN", doc="empty disables")
    shadow_submit_target_addr: str = _f("", env="SHADOW_SUBMIT_TARGET_ADDR")
    shadow_submit_sample_rate: float = _f(0.0, env="SHADOW_SUBMIT_SAMPLE_RATE")
    io_backends: IOBackendsSection = _f(default_factory=IOBackendsSection)
    log_level: str = _f("INFO", env="LOG_LEVEL")

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
        """The wedge backstop threshold (0 = disabled).

        Derived as callDeadlineMs + 5 s; an explicit value at or below
        callDeadlineMs + 1 s is raised to the derived one, so a call that is merely
        using its whole budget is never mistaken for a wedged executor. With an
        unlimited budget (callDeadlineMs = 0) nothing is derived: a long CPU-bound
        call is legitimate there, so only an explicit threshold arms the backstop."""
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
        host, port = split_host_port(self.listen_addr)
        if host == "":
            host = "[::]"
        elif ":" in host:
            host = f"[{host}]"
        return f"{host}:{port}"

    def resolved_worker_addr(self, bound_port: int | None = None) -> str:
        """workerAddr, or (when empty) the outbound IP plus the listen port; the etcd
        key suffix and the address the Coordinator dials."""
        if self.worker_addr:
            return self.worker_addr
        host, port = split_host_port(self.listen_addr)
        if bound_port is not None:
            port = bound_port
        if host in ("", "0.0.0.0", "::"):
            host = outbound_ip()
        if ":" in host:
            host = f"[{host}]"
        return f"{host}:{port}"

    def log_level_number(self) -> int:
        name = self.log_level.strip().upper()
        return logging.WARNING if name == "WARN" else logging.getLevelName(name)

    # --- conversion to the cores' configs ----------------------------------------------

    def core_config(self):
        """blockx.core.config.Config for WorkerCore."""
        from blockx.core import config as core_cfg
        return _build(core_cfg.Config, {
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
        })

    def admission_config(self):
        """blockx.core.config.AdmissionConfig for the phase admission semaphores."""
        from blockx.core import config as core_cfg
        a = self.admission
        return _build(core_cfg.AdmissionConfig, {
            "builder_slots": a.builder_slots,
            "executor_task_slots": a.executor_task_slots,
            "plugin_slots": a.plugin_slots,
            "scan_slots": a.scan_slots,
        })

    def dispatcher_config(self):
        """blockx.core.dispatcher_config.DispatcherConfig, with the stall timeout
        already derived (the core takes it as given)."""
        from blockx.core import dispatcher_config as dc
        d = self.dispatcher
        return _build(dc.DispatcherConfig, {
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


def _build(cls, values: dict[str, Any]):
    """Instantiate a core config dataclass from the keys it declares, so the app
    config can carry fields a core has not (yet) adopted without breaking."""
    if is_dataclass(cls):
        names = {f.name for f in fields(cls) if f.init}
        return cls(**{k: v for k, v in values.items() if k in names})
    return cls(**values)


# --- field metadata helpers ---------------------------------------------------------

_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    h = _HINTS.get(cls)
    if h is None:
        h = _HINTS[cls] = get_type_hints(cls)
    return h


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _json_name(f) -> str:
    return f.metadata.get("json") or _camel(f.name)


def _public_fields(obj_or_cls):
    return [f for f in fields(obj_or_cls) if not f.metadata.get("internal")]


def _to_dict(obj) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in _public_fields(obj):
        value = getattr(obj, f.name)
        out[_json_name(f)] = _to_dict(value) if is_dataclass(value) else (
            list(value) if isinstance(value, list) else value)
    return out


def _iter_leaves(obj, path: str = ""):
    """(json_path, owner, field, type) of every scalar field."""
    for f in _public_fields(obj):
        t = _hints(type(obj))[f.name]
        p = f"{path}{_json_name(f)}"
        value = getattr(obj, f.name)
        if is_dataclass(value):
            yield from _iter_leaves(value, p + ".")
        else:
            yield p, obj, f, t


# Environment variables that belong to nested fields (the nested field's metadata
# names the variable only where the spec gives one; these are extras of this build).
_EXTRA_ENV = {
    "ioBackends.devstub.concurrency": "IO_DEVSTUB_CONCURRENCY",
}


def env_vars() -> dict[str, str]:
    """Environment variable -> JSON path, for docs, tests and error messages."""
    out = {}
    for path, _owner, f, _t in _iter_leaves(WorkerFullConfig()):
        env = f.metadata.get("env") or _EXTRA_ENV.get(path)
        if env:
            out[env] = path
    return out


def _env_of(path: str) -> str | None:
    for env, p in env_vars().items():
        if p == path:
            return env
    return None


# --- value conversion -------------------------------------------------------------


def _type_name(t: Any) -> str:
    return {int: "an integer", bool: "a boolean", str: "a string", float: "a number"}.get(
        t, "a list of strings")


def _json_value(path: str, t: Any, value: Any) -> Any:
    """Convert a JSON value for field type t; raise ValueError with the reason."""
    if t is bool:
        if isinstance(value, bool):
            return value
    elif t is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if not INT64_MIN <= value <= INT64_MAX:
                raise ValueError(f"{path}: {value} is out of the 64-bit integer range")
            return value
    elif t is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(float(value)):
                raise ValueError(f"{path}: must be a finite number")
            return float(value)
    elif t is str:
        if isinstance(value, str):
            return value
    else:  # list[str]: etcdEndpoints accepts a list or a comma-separated string
        if isinstance(value, str):
            return _endpoints(value)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return _endpoints(",".join(value))
    raise ValueError(f"{path}: expected {_type_name(t)}, got {_json_type(value)} {json.dumps(value)[:60]}")


def _endpoints(text: str) -> list[str]:
    items = [p.strip() for p in text.split(",")]
    items = [p for p in items if p]
    if len(items) == 1 and items[0].lower() == "none":
        return []
    return items


def parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in _TRUE:
        return True
    if t in _FALSE:
        return False
    raise ValueError(f"{text!r} is not a boolean (use true/false, 1/0, yes/no, on/off)")


def parse_int(text: str) -> int:
    t = text.strip()
    body = t[1:] if t[:1] in "+-" else t
    if not body or not body.isascii() or not body.isdigit():
        raise ValueError(f"{text!r} is not an integer")
    value = int(t, 10)
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{text!r} is out of the 64-bit integer range")
    return value


def parse_float(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


def _env_value(t: Any, kind: str | None, text: str) -> Any:
    if kind == "duration":
        try:
            return parse_duration_ms(text.strip())
        except DurationError as exc:
            raise ValueError(f"{text!r} is not a Go duration: {exc.reason}") from None
    if t is bool:
        return parse_bool(text)
    if t is int:
        return parse_int(text)
    if t is float:
        return parse_float(text)
    if t is str:
        return text.strip()
    return _endpoints(text)


# --- loading ----------------------------------------------------------------------


def apply_json(cfg: WorkerFullConfig, data: Any, source: str = "config") -> None:
    """Override cfg with the keys present in `data` (a decoded JSON object)."""
    problems: list[str] = []
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: the top level must be a JSON object, got {_json_type(data)}"])
    _apply_obj(cfg, data, "", problems)
    if problems:
        raise ConfigError([f"{source}: {p}" for p in problems])


def _apply_obj(obj, data: dict, path: str, problems: list[str]) -> None:
    by_json = {_json_name(f): f for f in _public_fields(obj)}
    for key, value in data.items():
        f = by_json.get(key)
        full = f"{path}{key}"
        if f is None:
            hint = _suggest(key, path, list(by_json))
            where = f" in {path[:-1]!r}" if path else ""
            problems.append(f"unknown key {full!r}{where}{hint}")
            continue
        t = _hints(type(obj))[f.name]
        if is_dataclass(t):
            if not isinstance(value, dict):
                problems.append(f"{full}: expected an object, got {_json_type(value)}")
                continue
            _apply_obj(getattr(obj, f.name), value, full + ".", problems)
            continue
        try:
            setattr(obj, f.name, _json_value(full, t, value))
        except ValueError as exc:
            problems.append(str(exc))


def _suggest(key: str, path: str, siblings: list[str]) -> str:
    """' (did you mean ...?)' for a key put at the wrong level or misspelt."""
    leaves = [p for p, _o, _f, _t in _iter_leaves(WorkerFullConfig())]
    exact = [p for p in leaves if p.rsplit(".", 1)[-1] == key]
    if exact:
        return f" (did you mean {exact[0]!r}?)"
    close = difflib.get_close_matches(key, siblings, n=1)
    if close:
        return f" (did you mean {path + close[0]!r}?)"
    lowered = {p.rsplit(".", 1)[-1].lower(): p for p in leaves}
    close = difflib.get_close_matches(key.lower(), list(lowered), n=1)
    return f" (did you mean {lowered[close[0]]!r}?)" if close else ""


def apply_env(cfg: WorkerFullConfig, env: Mapping[str, str]) -> None:
    """Override cfg with every set environment variable the config knows."""
    problems: list[str] = []
    for path, owner, f, t in _iter_leaves(cfg):
        name = f.metadata.get("env") or _EXTRA_ENV.get(path)
        if not name or name not in env:
            continue
        text = env[name]
        try:
            setattr(owner, f.name, _env_value(t, f.metadata.get("env_kind"), text))
        except ValueError as exc:
            problems.append(f"{name} (for {path}): {exc}")
    if problems:
        raise ConfigError(problems, header="invalid environment variable")


def load_config_file(cfg: WorkerFullConfig, path: str) -> None:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError([f"WORKER_CONFIG file {path!r} cannot be read: {exc.strerror or exc}"]) from None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError([f"WORKER_CONFIG file {path!r} is not valid JSON: {exc}"]) from None
    apply_json(cfg, data, source=f"WORKER_CONFIG file {path!r}")


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


# --- addresses ----------------------------------------------------------------------


def split_host_port(addr: str) -> tuple[str, int]:
    """("host", port) of "host:port", "[v6]:port" or ":port"; ValueError otherwise."""
    if not isinstance(addr, str) or ":" not in addr:
        raise ValueError(f"{addr!r} is not host:port")
    if addr.startswith("["):
        end = addr.find("]")
        if end < 0 or addr[end + 1:end + 2] != ":":
            raise ValueError(f"{addr!r} is not [host]:port")
        host, port_text = addr[1:end], addr[end + 2:]
    else:
        host, _, port_text = addr.rpartition(":")
        if ":" in host:
            raise ValueError(f"{addr!r}: an IPv6 host needs brackets, e.g. [::1]:8081")
    if not port_text.isascii() or not port_text.isdigit():
        raise ValueError(f"{addr!r}: port {port_text!r} is not a number")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"{addr!r}: port {port} is out of range 0..65535")
    if any(c.isspace() for c in host):
        raise ValueError(f"{addr!r}: host contains whitespace")
    return host, port


def outbound_ip() -> str:
    """The local IP used to reach the outside (no packet is sent: UDP connect only
    selects a route); 127.0.0.1 when there is no route."""
    for family, target in ((socket.AF_INET, ("192.0.2.1", 9)), (socket.AF_INET6, ("2001:db8::1", 9))):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect(target)
                ip = s.getsockname()[0]
                if ip and not ipaddress.ip_address(ip).is_unspecified:
                    return ip
        except OSError:
            continue
    return "127.0.0.1"


def prepare_socket_dir(socket_path: str) -> None:
    """Create the socket's directory with mode 0700 (or check an existing one):
    only the Worker's user may enter it, so no other user can connect to the
    executor socket or replace it. Raises ConfigError with the reason."""
    d = os.path.dirname(os.path.abspath(socket_path))
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        st = os.stat(d, follow_symlinks=False)
    except OSError as exc:
        raise ConfigError([f"socketPath directory {d!r} cannot be created: {exc.strerror or exc}"]) from None
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError([f"socketPath directory {d!r} is not a directory (a symlink is not accepted)"])
    if st.st_uid != os.getuid():
        raise ConfigError([f"socketPath directory {d!r} belongs to uid {st.st_uid}, not to this user "
                           f"({os.getuid()}); choose another EXECUTOR_SOCKET_PATH"])
    if st.st_mode & 0o077:
        try:
            os.chmod(d, 0o700)
        except OSError as exc:
            raise ConfigError([f"socketPath directory {d!r} is accessible to other users and "
                               f"cannot be made private: {exc.strerror or exc}"]) from None


# --- validation ---------------------------------------------------------------------


def _violations(cfg: WorkerFullConfig, deployment: str) -> list[str]:
    out: list[str] = []

    def name(path: str) -> str:
        env = _env_of(path)
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
