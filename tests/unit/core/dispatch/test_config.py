"""DispatcherConfig: its defaults, the derived stall timeout, and validation that
lists every problem."""
import pytest

from blockx.core.config import ConfigError
from blockx.core.dispatch.dispatcher import DispatcherCore
from blockx.core.dispatch.config import DispatcherConfig, derive_stall_timeout_ms


def test_config_defaults_are_the_documented_ones():
    c = DispatcherConfig()
    assert (c.executor_max_inflight, c.executor_max_runnable, c.executor_selection_sample_size,
            c.executor_memory_high_watermark, c.task_max_inflight_calls, c.call_deadline_ms,
            c.max_subcall_depth, c.base_backoff_ms, c.default_max_attempts,
            c.default_retry_jitter_percent, c.instance_fairness, c.instance_fairness_quantum,
            c.max_collected_output_bytes, c.max_outstanding_batches, c.batch_max_rows,
            c.batch_max_args_bytes) == (128, 128, 0, 0, 1024, 5000, 8, 10, 3, 5, False, 0, 0, 2,
                                        8192, 32 * 1024 * 1024)
    assert c.effective_stall_timeout_ms == 10_000
    assert c.validate() is c


@pytest.mark.parametrize("deadline,explicit,expected", [
    (5000, 0, 10_000),      # derived
    (5000, 6000, 10_000),   # at deadline + 1000: raised
    (5000, 6001, 6001),     # above: kept
    (5000, 20_000, 20_000),
    (0, 0, 5000),           # unlimited budget: still 0 + 5000, so the backstop stops a wedged call
    (0, 1000, 5000),        # at deadline + 1000: raised
    (0, 1001, 1001),
    (0, 7000, 7000),
])
def test_stall_timeout_derivation(deadline, explicit, expected):
    assert derive_stall_timeout_ms(deadline, explicit) == expected
    # Idempotent: the app may pass an already-derived value.
    assert derive_stall_timeout_ms(deadline, expected) == expected


def test_config_validate_lists_every_problem():
    c = DispatcherConfig(executor_max_inflight=0, task_max_inflight_calls=-1,
                         default_retry_jitter_percent=6, instance_fairness_quantum=-1)
    with pytest.raises(ConfigError) as e:
        c.validate()
    msg = str(e.value)
    assert "dispatcher.executorMaxInflight must be > 0, got 0" in msg
    assert "dispatcher.taskMaxInflightCalls must be > 0, got -1" in msg
    assert "defaultRetryJitterPercent must be between 0 and 5, got 6" in msg
    assert "instanceFairnessQuantum must be >= 0, got -1" in msg
    assert len(e.value.violations) == 4


def test_config_rejects_non_integers_and_core_validates_on_construction():
    with pytest.raises(ConfigError, match="callDeadlineMs must be an integer, got 1.5"):
        DispatcherConfig(call_deadline_ms=1.5).validate()
    with pytest.raises(ConfigError, match="instanceFairness must be true or false"):
        DispatcherConfig(instance_fairness=1).validate()
    with pytest.raises(ConfigError):
        DispatcherCore(DispatcherConfig(batch_max_rows=0), lambda: 0.0)


def test_quantum_effective_value():
    assert DispatcherConfig(instance_fairness_quantum=0).effective_fairness_quantum == 1
    assert DispatcherConfig(instance_fairness_quantum=1).effective_fairness_quantum == 1
    assert DispatcherConfig(instance_fairness_quantum=7).effective_fairness_quantum == 7
