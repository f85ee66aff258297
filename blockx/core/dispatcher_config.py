"""DispatcherCore configuration (spec: ``core.DispatcherConfig`` plus the stream
build window the dispatcher enforces).

Rules: every field is a plain int (bools only where named), all times are int ms,
0 means "disabled / unlimited" where the field says so. ``validate()`` checks
every rule and raises one ``ConfigError`` listing each violation, so an operator
fixes a bad file in one pass. The core never reads the environment: the app
loader builds this object (``WorkerFullConfig.dispatcher_config()``).

The wedge threshold ``scheduler_stall_timeout_ms`` is derived from the call
budget: a call that merely uses its whole budget must never look like a wedged
executor, so an explicit value at or below ``call_deadline_ms + 1000`` is raised
to ``call_deadline_ms + 5000``. With an unlimited budget (``call_deadline_ms = 0``)
a long CPU-bound call is legitimate, so only an explicit threshold applies there
(0 disables the stall filter and the backstop). Deriving twice is idempotent, so
the app may pass an already-derived value.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Final

from blockx.core.config import ConfigError

MiB: Final = 1024 * 1024
STALL_DERIVED_MARGIN_MS: Final = 5_000
STALL_MIN_MARGIN_MS: Final = 1_000
MAX_FAIRNESS_QUANTUM: Final = 1024
MAX_RETRY_JITTER_PERCENT: Final = 5


def derive_stall_timeout_ms(call_deadline_ms: int, explicit_ms: int) -> int:
    """The effective SchedulerStallTimeoutMs (0 = disabled); see the module doc."""
    if call_deadline_ms <= 0:
        return max(explicit_ms, 0)
    derived = call_deadline_ms + STALL_DERIVED_MARGIN_MS
    if explicit_ms <= call_deadline_ms + STALL_MIN_MARGIN_MS:
        return derived
    return explicit_ms


@dataclass(slots=True)
class DispatcherConfig:
    executor_max_inflight: int = 128          # per-executor local in-flight cap (> 0)
    executor_max_runnable: int = 128          # compensated runnable threshold; 0 disables
    executor_selection_sample_size: int = 0   # 0 scores every eligible executor
    executor_memory_high_watermark: int = 0   # executor RSS bytes; 0 disables
    task_max_inflight_calls: int = 1024       # per-task admission window (root calls)
    call_deadline_ms: int = 5_000             # budget per root attempt; 0 = unlimited
    scheduler_stall_timeout_ms: int = 0       # 0 = derived (see module doc)
    max_subcall_depth: int = 8                # deepest allowed subcall (a root's child is depth 1)
    base_backoff_ms: int = 10                 # retry base when the task policy sets none
    max_backoff_ms: int = 60_000              # cap on one retry delay before jitter; 0 = no cap
    default_max_attempts: int = 3             # when the task policy sets none
    default_retry_jitter_percent: int = 5     # when the task gives no policy at all
    instance_fairness: bool = False           # max-min admission across instance ids
    instance_fairness_quantum: int = 0        # consecutive binds per instance; 0/1 = per call
    max_collected_output_bytes: int = 0       # per task; 0 = unlimited
    max_outstanding_batches: int = 2          # streaming credit window
    batch_max_rows: int = 8192
    batch_max_args_bytes: int = 32 * MiB

    @property
    def effective_stall_timeout_ms(self) -> int:
        return derive_stall_timeout_ms(self.call_deadline_ms, self.scheduler_stall_timeout_ms)

    @property
    def effective_fairness_quantum(self) -> int:
        """Binds served to one instance before re-selecting (>= 1, capped at 1024)."""
        return min(max(self.instance_fairness_quantum, 1), MAX_FAIRNESS_QUANTUM)

    def validate(self) -> "DispatcherConfig":
        """Raise ConfigError listing every violation; return self when valid."""
        bad: list[str] = []
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "instance_fairness":
                if not isinstance(v, bool):
                    bad.append(f"dispatcher.{_camel(f.name)} must be true or false, got {v!r}")
            elif not isinstance(v, int) or isinstance(v, bool):
                bad.append(f"dispatcher.{_camel(f.name)} must be an integer, got {v!r}")
        if not bad:
            _at_least(bad, self, "executor_max_inflight", 1)
            _at_least(bad, self, "executor_max_runnable", 0, "0 disables the filter")
            _at_least(bad, self, "executor_selection_sample_size", 0, "0 scans all executors")
            _at_least(bad, self, "executor_memory_high_watermark", 0, "0 disables the filter")
            _at_least(bad, self, "task_max_inflight_calls", 1)
            _at_least(bad, self, "call_deadline_ms", 0, "0 = unlimited")
            _at_least(bad, self, "scheduler_stall_timeout_ms", 0, "0 = derived")
            _at_least(bad, self, "max_subcall_depth", 0, "0 disables subcalls")
            _at_least(bad, self, "base_backoff_ms", 0)
            _at_least(bad, self, "max_backoff_ms", 0, "0 = no cap")
            _at_least(bad, self, "default_max_attempts", 1, "1 means no retry")
            _at_least(bad, self, "max_collected_output_bytes", 0, "0 = unlimited")
            _at_least(bad, self, "max_outstanding_batches", 1)
            _at_least(bad, self, "batch_max_rows", 1)
            _at_least(bad, self, "batch_max_args_bytes", 1)
            if not 0 <= self.default_retry_jitter_percent <= MAX_RETRY_JITTER_PERCENT:
                bad.append(f"dispatcher.defaultRetryJitterPercent must be between 0 and "
                           f"{MAX_RETRY_JITTER_PERCENT}, got {self.default_retry_jitter_percent}")
            if not 0 <= self.instance_fairness_quantum <= MAX_FAIRNESS_QUANTUM:
                bad.append(f"dispatcher.instanceFairnessQuantum must be between 0 and "
                           f"{MAX_FAIRNESS_QUANTUM} (0 and 1 both re-select per call), "
                           f"got {self.instance_fairness_quantum}")
        if bad:
            raise ConfigError(bad, "dispatcher")
        return self


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _at_least(bad: list[str], cfg: Any, name: str, lo: int, note: str = "") -> None:
    v = getattr(cfg, name)
    if v < lo:
        rule = "must be > 0" if lo == 1 else f"must be >= {lo}"
        suffix = f" ({note})" if note else ""
        bad.append(f"dispatcher.{_camel(name)} {rule}{suffix}, got {v}")
