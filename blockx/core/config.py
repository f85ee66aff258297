"""WorkerCore configuration: ``Config`` and ``AdmissionConfig``.

Field names are snake_case; ``JSON_KEYS`` maps the lowerCamelCase JSON
names (``worker.taskSlots`` ...) to them. All times are int ms.

Each setting's constraint is stated once, in ``CONFIG_RULES`` / ``ADMISSION_RULES``
(and the two rules that couple fields, ``deadline_problem`` / ``retention_problem``);
``validate()`` applies them here and the app applies the same rules to its config
sections in the operator's vocabulary. ``validate()`` raises one ``ConfigError``
listing every violation, so an operator fixes a bad file in one pass. Values must be
real ints (``True`` and ``2.5`` are rejected): a config typo must not silently
become a 1-slot worker.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from blockx.core.config_error import ConfigError
from blockx.core.config_rules import Rule, Wording, check

__all__ = ["ADMISSION_JSON_KEYS", "ADMISSION_RULES", "CONFIG_RULES", "JSON_KEYS", "MAX_RETRY_JITTER_PERCENT",
           "SNAPSHOT_RETENTION_SLACK_MS", "AdmissionConfig", "Config", "ConfigError",
           "deadline_problem", "retention_problem", "share_problem", "ttl_problem"]

# Extra retention on top of maxTaskTimeoutMs when functionSnapshotRetentionMs is 0.
SNAPSHOT_RETENTION_SLACK_MS: Final = 10_000
MAX_RETRY_JITTER_PERCENT: Final = 5

# Per-task call retry defaults; DispatcherConfig carries copies and reuses these rules.
DEFAULT_MAX_ATTEMPTS_RULE: Final = Rule("default_max_attempts", 1, text=">= 1", note="1 means no retry")
RETRY_JITTER_RULE: Final = Rule("default_retry_jitter_percent", 0, MAX_RETRY_JITTER_PERCENT)

CONFIG_RULES: Final = (
    Rule("task_slots", 1),
    Rule("default_ttl_ms", 1, note="a zero TTL would expire every inline reservation at once"),
    Rule("task_deadline_ms", 1),
    Rule("max_task_timeout_ms", 1),
    Rule("result_retention_ms", 0),
    Rule("watch_disconnect_grace_ms", 0, note="0 disables Watch-disconnect reclamation"),
    DEFAULT_MAX_ATTEMPTS_RULE,
    Rule("default_base_backoff_ms", 0),
    RETRY_JITTER_RULE,
    Rule("function_snapshot_retention_ms", 0, note="0 = maxTaskTimeoutMs + 10s"),
    Rule("max_slot_ttl_ms", 1, note="the longest slot reservation a client may ask for"),
    Rule("max_payload_bytes", 1),
    Rule("max_result_handler_config_bytes", 1),
    Rule("max_instance_id_bytes", 1),
    Rule("max_slots_per_identity", 0, note="0 = half of taskSlots, at least 1"),
    Rule("max_queued_call_bytes_per_identity", 1),
)

ADMISSION_RULES: Final = tuple(
    Rule(f, 1, note="a phase with no admission slots could never run")
    for f in ("builder_slots", "executor_task_slots", "plugin_slots", "scan_slots"))


def deadline_problem(deadline_ms: int, max_timeout_ms: int, name: Callable[[str], str]) -> str | None:
    """taskDeadlineMs (the default timeout) may not exceed maxTaskTimeoutMs (its cap).
    A non-positive cap is already reported by its own rule."""
    if deadline_ms > max_timeout_ms > 0:
        return (f"{name('task_deadline_ms')} ({deadline_ms}) must not exceed "
                f"{name('max_task_timeout_ms')} ({max_timeout_ms})")
    return None


def ttl_problem(default_ttl_ms: int, max_ttl_ms: int, name: Callable[[str], str]) -> str | None:
    """The TTL of an inline reservation may not exceed the cap a client's TTL has."""
    if default_ttl_ms > max_ttl_ms > 0:
        return (f"{name('default_ttl_ms')} ({default_ttl_ms}) must not exceed "
                f"{name('max_slot_ttl_ms')} ({max_ttl_ms})")
    return None


def retention_problem(retention_ms: int, max_timeout_ms: int, name: Callable[[str], str]) -> str | None:
    """A pinned code snapshot must outlive the longest task that can pin it."""
    if 0 < retention_ms < max_timeout_ms:
        return (f"{name('function_snapshot_retention_ms')} ({retention_ms}) must be 0 "
                f"(= maxTaskTimeoutMs + 10s) or >= {name('max_task_timeout_ms')} ({max_timeout_ms}), "
                "so a snapshot pinned by a running task is never purged")
    return None


def share_problem(max_bytes: int, max_payload_bytes: int, name: Callable[[str], str]) -> str | None:
    """One identity's share of queued call bytes must hold at least one task of the largest payload."""
    if 0 < max_bytes < max_payload_bytes:
        return (f"{name('max_queued_call_bytes_per_identity')} ({max_bytes}) must be at least "
                f"{name('max_payload_bytes')} ({max_payload_bytes}), or a task of the largest payload "
                "could never be submitted")
    return None


def _core_wording(keys: dict[str, str]) -> Wording:
    return Wording(lambda field: f"{keys[field]} ({field})")


@dataclass(slots=True)
class Config:
    """Slot table, deadlines, retention and per-task call retry defaults."""

    task_slots: int = 50
    default_ttl_ms: int = 5_000
    task_deadline_ms: int = 300_000
    max_task_timeout_ms: int = 28_800_000
    result_retention_ms: int = 300_000
    watch_disconnect_grace_ms: int = 0                # 0 disables Watch-disconnect reclamation
    default_max_attempts: int = 3
    default_base_backoff_ms: int = 10
    default_retry_jitter_percent: int = 5
    function_snapshot_retention_ms: int = 0           # 0 means max_task_timeout_ms + 10 s
    # Bounds of what one request may ask for (core.worker.requests checks them).
    max_slot_ttl_ms: int = 600_000                    # ttl_ms of RequestTaskSlot
    max_payload_bytes: int = 16 * 1024 * 1024         # task.function_call.payload
    max_result_handler_config_bytes: int = 1024 * 1024
    max_instance_id_bytes: int = 256
    # Fair shares of one identity (core.worker.shares); admin and the unrestricted caller have none.
    max_slots_per_identity: int = 0                   # 0 = half of task_slots, at least 1
    max_queued_call_bytes_per_identity: int = 64 * 1024 * 1024   # payload bytes of its tasks not yet ended

    @property
    def effective_function_snapshot_retention_ms(self) -> int:
        if self.function_snapshot_retention_ms == 0:
            return self.max_task_timeout_ms + SNAPSHOT_RETENTION_SLACK_MS
        return self.function_snapshot_retention_ms

    def validate(self) -> "Config":
        """Raise ConfigError listing every violation; return self when valid."""
        wording = _core_wording(JSON_KEYS_REVERSE)
        bad: list[str] = []
        if check(self, CONFIG_RULES, wording, bad):
            for problem in (deadline_problem(self.task_deadline_ms, self.max_task_timeout_ms, wording.name),
                            retention_problem(self.function_snapshot_retention_ms, self.max_task_timeout_ms,
                                              wording.name),
                            ttl_problem(self.default_ttl_ms, self.max_slot_ttl_ms, wording.name),
                            share_problem(self.max_queued_call_bytes_per_identity, self.max_payload_bytes,
                                          wording.name)):
                if problem:
                    bad.append(problem)
        if bad:
            raise ConfigError(bad, "invalid worker configuration")
        return self

    def to_json_dict(self) -> dict[str, int]:
        return {camel: getattr(self, snake) for camel, snake in JSON_KEYS.items()}

    @classmethod
    def from_json_dict(cls, data: dict[str, Any], base: "Config | None" = None) -> "Config":
        """Override ``base`` (default: defaults) with the lowerCamelCase keys present in
        ``data``. Unknown keys raise ConfigError (a misspelt key must not be ignored).
        The result is not validated; call ``validate()``."""
        return _from_json(cls, JSON_KEYS, data, base, "worker")


@dataclass(slots=True)
class AdmissionConfig:
    """Phase-level admission semaphore sizes (enforced by the adapter)."""

    builder_slots: int = 16
    executor_task_slots: int = 32
    plugin_slots: int = 16
    scan_slots: int = 8

    def validate(self) -> "AdmissionConfig":
        bad: list[str] = []
        check(self, ADMISSION_RULES, _core_wording(ADMISSION_JSON_KEYS_REVERSE), bad)
        if bad:
            raise ConfigError(bad, "invalid admission configuration")
        return self

    def to_json_dict(self) -> dict[str, int]:
        return {camel: getattr(self, snake) for camel, snake in ADMISSION_JSON_KEYS.items()}

    @classmethod
    def from_json_dict(cls, data: dict[str, Any],
                       base: "AdmissionConfig | None" = None) -> "AdmissionConfig":
        return _from_json(cls, ADMISSION_JSON_KEYS, data, base, "admission")


def _from_json(cls: Any, keys: dict[str, str], data: dict[str, Any], base: Any, section: str) -> Any:
    unknown = sorted(k for k in data if k not in keys)
    if unknown:
        raise ConfigError([f"unknown key {k!r}; known keys: {', '.join(keys)}" for k in unknown],
                          f"invalid {section} configuration")
    out = dataclasses.replace(base) if base is not None else cls()
    for camel, value in data.items():
        setattr(out, keys[camel], value)
    return out


# lowerCamelCase JSON key (under "worker") -> field name.
JSON_KEYS: Final = {
    "taskSlots": "task_slots",
    "defaultTTLMs": "default_ttl_ms",
    "taskDeadlineMs": "task_deadline_ms",
    "maxTaskTimeoutMs": "max_task_timeout_ms",
    "resultRetentionMs": "result_retention_ms",
    "watchDisconnectGraceMs": "watch_disconnect_grace_ms",
    "defaultMaxAttempts": "default_max_attempts",
    "defaultBaseBackoffMs": "default_base_backoff_ms",
    "defaultRetryJitterPercent": "default_retry_jitter_percent",
    "functionSnapshotRetentionMs": "function_snapshot_retention_ms",
    "maxSlotTtlMs": "max_slot_ttl_ms",
    "maxPayloadBytes": "max_payload_bytes",
    "maxResultHandlerConfigBytes": "max_result_handler_config_bytes",
    "maxInstanceIdBytes": "max_instance_id_bytes",
    "maxSlotsPerIdentity": "max_slots_per_identity",
    "maxQueuedCallBytesPerIdentity": "max_queued_call_bytes_per_identity",
}
JSON_KEYS_REVERSE: Final = {v: k for k, v in JSON_KEYS.items()}

# lowerCamelCase JSON key (under "admission") -> field name.
ADMISSION_JSON_KEYS: Final = {
    "builderSlots": "builder_slots",
    "executorTaskSlots": "executor_task_slots",
    "pluginSlots": "plugin_slots",
    "scanSlots": "scan_slots",
}
ADMISSION_JSON_KEYS_REVERSE: Final = {v: k for k, v in ADMISSION_JSON_KEYS.items()}
