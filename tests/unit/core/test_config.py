"""core.Config / AdmissionConfig: defaults, validation messages, JSON mapping."""
import dataclasses

import pytest

from blockx.core.config import (ADMISSION_JSON_KEYS, ADMISSION_RULES, CONFIG_RULES, JSON_KEYS, AdmissionConfig,
                                Config, ConfigError)
from blockx.core.dispatch.config import DISPATCHER_RULES, DispatcherConfig
from blockx.core.worker.core import WorkerCore


def violations(cfg):
    with pytest.raises(ConfigError) as ei:
        cfg.validate()
    assert isinstance(ei.value, ValueError)
    return ei.value.violations


def test_defaults_are_the_documented_ones():
    c = Config()
    assert (c.task_slots, c.default_ttl_ms, c.task_deadline_ms, c.max_task_timeout_ms,
            c.result_retention_ms, c.watch_disconnect_grace_ms, c.default_max_attempts,
            c.default_base_backoff_ms, c.default_retry_jitter_percent,
            c.function_snapshot_retention_ms) == (50, 5000, 300_000, 28_800_000, 300_000, 0, 3, 10, 5, 0)
    assert c.validate() is c
    a = AdmissionConfig()
    assert (a.builder_slots, a.executor_task_slots, a.plugin_slots, a.scan_slots) == (16, 32, 16, 8)
    assert a.validate() is a


def test_snapshot_retention_zero_means_max_timeout_plus_ten_seconds():
    assert Config().effective_function_snapshot_retention_ms == 28_810_000
    assert Config(function_snapshot_retention_ms=30_000_000).effective_function_snapshot_retention_ms == 30_000_000


@pytest.mark.parametrize("kw,message", [
    ({"task_slots": 0}, "taskSlots (task_slots) must be > 0, got 0"),
    ({"task_slots": -3}, "taskSlots (task_slots) must be > 0, got -3"),
    ({"default_ttl_ms": 0}, "defaultTTLMs (default_ttl_ms) must be > 0, got 0"),
    ({"task_deadline_ms": 0}, "taskDeadlineMs (task_deadline_ms) must be > 0, got 0"),
    ({"task_deadline_ms": 28_800_001},
     "taskDeadlineMs (task_deadline_ms) (28800001) must not exceed maxTaskTimeoutMs (max_task_timeout_ms) (28800000)"),
    ({"result_retention_ms": -1}, "resultRetentionMs (result_retention_ms) must be >= 0, got -1"),
    ({"watch_disconnect_grace_ms": -1}, "watchDisconnectGraceMs (watch_disconnect_grace_ms) must be >= 0, got -1"),
    ({"default_max_attempts": 0}, "defaultMaxAttempts (default_max_attempts) must be >= 1, got 0 (1 means no retry)"),
    ({"default_base_backoff_ms": -10}, "defaultBaseBackoffMs (default_base_backoff_ms) must be >= 0, got -10"),
    ({"default_retry_jitter_percent": 6},
     "defaultRetryJitterPercent (default_retry_jitter_percent) must be between 0 and 5, got 6"),
    ({"default_retry_jitter_percent": -1},
     "defaultRetryJitterPercent (default_retry_jitter_percent) must be between 0 and 5, got -1"),
    ({"function_snapshot_retention_ms": 1000},
     "functionSnapshotRetentionMs (function_snapshot_retention_ms) (1000) must be 0 (= maxTaskTimeoutMs + 10s) "
     "or >= maxTaskTimeoutMs (max_task_timeout_ms) (28800000)"),
    ({"function_snapshot_retention_ms": -1},
     "functionSnapshotRetentionMs (function_snapshot_retention_ms) must be >= 0, got -1"),
    ({"task_slots": 2.5}, "taskSlots (task_slots) must be an integer, got 2.5"),
    ({"default_ttl_ms": True}, "defaultTTLMs (default_ttl_ms) must be an integer, got True"),
    ({"result_retention_ms": "300000"}, "resultRetentionMs (result_retention_ms) must be an integer, got '300000'"),
])
def test_each_violation_has_a_clear_message(kw, message):
    found = violations(Config(**kw))
    assert len(found) == 1 and found[0].startswith(message), found


def test_boundary_values_are_valid():
    Config(task_deadline_ms=28_800_000, default_retry_jitter_percent=0,
           function_snapshot_retention_ms=28_800_000, result_retention_ms=0,
           default_base_backoff_ms=0, task_slots=1).validate()
    Config(default_retry_jitter_percent=5).validate()


def test_every_violation_is_reported_at_once():
    with pytest.raises(ConfigError) as ei:
        Config(task_slots=0, task_deadline_ms=10**9, default_retry_jitter_percent=9).validate()
    assert len(ei.value.violations) == 3
    text = str(ei.value)
    assert text.startswith("invalid worker configuration (3 problems):")
    assert "taskSlots" in text and "taskDeadlineMs" in text and "defaultRetryJitterPercent" in text


@pytest.mark.parametrize("field", ["builder_slots", "executor_task_slots", "plugin_slots", "scan_slots"])
def test_admission_slots_must_be_positive(field):
    found = violations(AdmissionConfig(**{field: 0}))
    camel = {v: k for k, v in ADMISSION_JSON_KEYS.items()}[field]
    assert found == [f"{camel} ({field}) must be > 0, got 0 (a phase with no admission slots could never run)"]
    assert "invalid admission configuration" in str(pytest.raises(ConfigError, AdmissionConfig(**{field: 0}).validate).value)


def test_json_round_trip_and_unknown_keys():
    c = Config.from_json_dict({"taskSlots": 8, "watchDisconnectGraceMs": 2000})
    assert (c.task_slots, c.watch_disconnect_grace_ms, c.default_ttl_ms) == (8, 2000, 5000)
    assert Config.from_json_dict(c.to_json_dict()) == c
    assert set(c.to_json_dict()) == set(JSON_KEYS)
    base = Config(task_slots=3)
    assert Config.from_json_dict({"resultRetentionMs": 1}, base).task_slots == 3 and base.result_retention_ms == 300_000
    with pytest.raises(ConfigError, match="unknown key 'taskSlot'"):
        Config.from_json_dict({"taskSlot": 8})
    a = AdmissionConfig.from_json_dict({"scanSlots": 2})
    assert a.scan_slots == 2 and AdmissionConfig.from_json_dict(a.to_json_dict()) == a


def test_worker_core_refuses_an_invalid_config():
    with pytest.raises(ConfigError, match="taskSlots"):
        WorkerCore(Config(task_slots=0))


@pytest.mark.parametrize("rules,cls", [(CONFIG_RULES, Config), (ADMISSION_RULES, AdmissionConfig),
                                       (DISPATCHER_RULES, DispatcherConfig)])
def test_every_setting_has_exactly_one_rule(rules, cls):
    # check() skips a rule whose field an object lacks (the app hands a section the
    # table of the core config it feeds), so a misspelt field would go unchecked.
    names = [r.field for r in rules]
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(cls))
