"""DispatcherCore configuration: the scheduler's limits plus the stream build
window the dispatcher enforces.

Rules: every field is a plain int (bools only where named), all times are int ms,
0 means "disabled / unlimited" where the field says so. Each setting's constraint
is stated once, in ``DISPATCHER_RULES`` (the retry defaults reuse WorkerCore's
rules); ``validate()`` applies them and raises one ``ConfigError`` listing each
violation, and the app applies the same rules to its dispatcher and streamBuild
sections. The core never reads the environment: the app
loader builds this object (``WorkerFullConfig.dispatcher_config()``).

The wedge threshold ``scheduler_stall_timeout_ms`` is derived from the call
budget: a call that merely uses its whole budget must never look like a wedged
executor, so an explicit value at or below ``call_deadline_ms + 1000`` is raised
to ``call_deadline_ms + 5000``. The same formula holds for an unlimited budget
(``call_deadline_ms = 0``): 5,000 ms there, so a call that never
yields to its executor's scheduler is still stopped by the backstop (a call with
no budget must yield now and then, e.g. through the SDK, to run longer). Deriving
twice is idempotent, so the app may pass an already-derived value.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from blockx.core.config import DEFAULT_MAX_ATTEMPTS_RULE, RETRY_JITTER_RULE
from blockx.core.config_error import ConfigError
from blockx.core.config_rules import Rule, Wording, check

MiB: Final = 1024 * 1024
STALL_DERIVED_MARGIN_MS: Final = 5_000
STALL_MIN_MARGIN_MS: Final = 1_000
MAX_FAIRNESS_QUANTUM: Final = 1024

DISPATCHER_RULES: Final = (
    Rule("executor_max_inflight", 1),
    Rule("executor_max_runnable", 0, note="0 disables the filter"),
    Rule("executor_selection_sample_size", 0, note="0 scores every candidate"),
    Rule("executor_memory_high_watermark", 0, note="0 disables the filter"),
    Rule("task_max_inflight_calls", 1),
    Rule("call_deadline_ms", 0, note="0 = unlimited"),
    Rule("scheduler_stall_timeout_ms", 0, note="0 = derived"),
    Rule("max_subcall_depth", 0, note="0 and 1 disable subcalls"),
    Rule("base_backoff_ms", 0),
    Rule("max_backoff_ms", 0, note="0 = no cap"),
    DEFAULT_MAX_ATTEMPTS_RULE,
    RETRY_JITTER_RULE,
    Rule("instance_fairness", kind=bool),
    # Above MAX_FAIRNESS_QUANTUM the quantum is capped (effective_fairness_quantum), not refused.
    Rule("instance_fairness_quantum", 0, note="0 and 1 both re-select per call"),
    Rule("max_collected_output_bytes", 0, note="0 = unlimited"),
    Rule("max_outstanding_batches", 1),
    Rule("batch_max_rows", 1),
    Rule("batch_max_args_bytes", 1),
)


def derive_stall_timeout_ms(call_deadline_ms: int, explicit_ms: int) -> int:
    """The effective SchedulerStallTimeoutMs; see the module doc."""
    call_deadline_ms = max(call_deadline_ms, 0)
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
    max_subcall_depth: int = 8                # a subcall's ancestry must be shorter: depths 1..7
    base_backoff_ms: int = 10                 # retry base when the task policy sets none
    max_backoff_ms: int = 60_000              # cap on one retry delay before jitter; 0 = no cap
    default_max_attempts: int = 3             # when the task policy sets none
    default_retry_jitter_percent: int = 5     # when the task gives no policy at all
    instance_fairness: bool = False           # max-min admission across instance ids
    instance_fairness_quantum: int = 0        # consecutive binds per instance; 0/1 = per call; capped at 1024
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
        check(self, DISPATCHER_RULES, _WORDING, bad)
        if bad:
            raise ConfigError(bad, "invalid dispatcher configuration")
        return self


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


_WORDING: Final = Wording(lambda field: f"dispatcher.{_camel(field)}")
