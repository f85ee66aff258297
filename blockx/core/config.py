"""WorkerCore configuration (spec: ``core.Config`` and ``AdmissionConfig``).

Field names are snake_case; ``JSON_KEYS`` maps the spec's lowerCamelCase JSON
names (``worker.taskSlots`` ...) to them so the app loader can apply a JSON file
or environment overrides without a second list of names. All times are int ms.

``validate()`` checks every rule and raises one ``ConfigError`` that lists every
violation, so an operator fixes a bad file in one pass instead of one error at
a time. Values must be real ints (``True`` and ``2.5`` are rejected): a config
typo must not silently become a 1-slot worker.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Final

# Extra retention on top of maxTaskTimeoutMs when functionSnapshotRetentionMs is 0.
SNAPSHOT_RETENTION_SLACK_MS: Final = 10_000
MAX_RETRY_JITTER_PERCENT: Final = 5


class ConfigError(ValueError):
    """Invalid configuration; ``violations`` holds one message per broken rule."""

    def __init__(self, violations: list[str], section: str = "worker") -> None:
        self.violations = list(violations)
        lines = "\n  - ".join(self.violations)
        super().__init__(f"invalid {section} configuration ({len(self.violations)} problem"
                         f"{'s' if len(self.violations) != 1 else ''}):\n  - {lines}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Checker:
    __slots__ = ("obj", "keys", "violations")

    def __init__(self, obj: Any, keys: dict[str, str]) -> None:
        self.obj = obj
        self.keys = keys  # snake -> camel, for messages in the operator's vocabulary
        self.violations: list[str] = []

    def name(self, field: str) -> str:
        return f"{self.keys[field]} ({field})"

    def ints(self) -> bool:
        ok = True
        for f in self.keys:
            v = getattr(self.obj, f)
            if not _is_int(v):
                self.violations.append(f"{self.name(f)} must be an integer, got {v!r}")
                ok = False
        return ok

    def at_least(self, field: str, lo: int, why: str = "") -> None:
        v = getattr(self.obj, field)
        if v < lo:
            rule = "must be > 0" if lo == 1 else f"must be >= {lo}"
            self.violations.append(f"{self.name(field)} {rule}, got {v}{why}")


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

    @property
    def effective_function_snapshot_retention_ms(self) -> int:
        if self.function_snapshot_retention_ms == 0:
            return self.max_task_timeout_ms + SNAPSHOT_RETENTION_SLACK_MS
        return self.function_snapshot_retention_ms

    def validate(self) -> "Config":
        """Raise ConfigError listing every violation; return self when valid."""
        c = _Checker(self, JSON_KEYS_REVERSE)
        if c.ints():
            c.at_least("task_slots", 1)
            c.at_least("default_ttl_ms", 1, " (a zero TTL would expire every inline reservation at once)")
            c.at_least("task_deadline_ms", 1)
            c.at_least("max_task_timeout_ms", 1)
            c.at_least("result_retention_ms", 0)
            c.at_least("watch_disconnect_grace_ms", 0, " (0 disables Watch-disconnect reclamation)")
            c.at_least("default_max_attempts", 1, " (1 means no retry)")
            c.at_least("default_base_backoff_ms", 0)
            c.at_least("function_snapshot_retention_ms", 0)
            if self.task_deadline_ms > self.max_task_timeout_ms:
                c.violations.append(
                    f"taskDeadlineMs {self.task_deadline_ms} exceeds maxTaskTimeoutMs "
                    f"{self.max_task_timeout_ms}; raise maxTaskTimeoutMs or lower taskDeadlineMs")
            j = self.default_retry_jitter_percent
            if not 0 <= j <= MAX_RETRY_JITTER_PERCENT:
                c.violations.append(
                    f"{c.name('default_retry_jitter_percent')} must be between 0 and "
                    f"{MAX_RETRY_JITTER_PERCENT}, got {j}")
            s = self.function_snapshot_retention_ms
            if 0 < s < self.max_task_timeout_ms:
                c.violations.append(
                    f"functionSnapshotRetentionMs {s} is below maxTaskTimeoutMs "
                    f"{self.max_task_timeout_ms}: a long task's pinned code epoch could be reclaimed; "
                    "set it >= maxTaskTimeoutMs, or 0 for maxTaskTimeoutMs + 10s")
        if c.violations:
            raise ConfigError(c.violations, "worker")
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
        c = _Checker(self, ADMISSION_JSON_KEYS_REVERSE)
        if c.ints():
            for f in ADMISSION_JSON_KEYS_REVERSE:
                c.at_least(f, 1, " (a phase with no admission slots could never run)")
        if c.violations:
            raise ConfigError(c.violations, "admission")
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
        raise ConfigError([f"unknown key {k!r}; known keys: {', '.join(keys)}" for k in unknown], section)
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
