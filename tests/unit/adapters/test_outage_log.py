"""OutageLog (blockx.adapters.outage_log): one WARNING per outage, then a line
at most every interval with the count, and a fresh WARNING for the next outage.
The clock is the caller's, so an hour of outage is walked through in a moment."""
import pytest

from blockx.adapters.outage_log import QUIET, REMIND, WARN, OutageLog


def test_one_warning_then_one_reminder_a_minute_over_an_hour_of_failures():
    log = OutageLog()                                   # the default: a minute
    verdicts = [log.failed(t * 0.5) for t in range(2 * 3600)]    # an attempt every 0.5 s for an hour
    assert verdicts[0] == WARN
    assert verdicts.count(WARN) == 1
    reminders = [i * 0.5 for i, v in enumerate(verdicts) if v == REMIND]
    assert reminders == [60.0 * k for k in range(1, 60)]          # at most one a minute, and one each minute
    assert log.failures == 2 * 3600 and log.since == 0.0


def test_a_reminder_says_how_many_failures_went_unlogged():
    log = OutageLog(interval_s=10)
    assert log.failed(0) == WARN
    assert [log.failed(t) for t in (1, 2, 3)] == [QUIET] * 3
    assert log.quiet == 3
    assert log.failed(10) == REMIND and log.quiet == 0 and log.failures == 5


def test_a_slow_retry_still_reminds_at_most_once_per_interval():
    log = OutageLog(interval_s=60)
    assert [log.failed(t) for t in (0, 200, 230, 261, 400)] == [WARN, REMIND, QUIET, REMIND, REMIND]


def test_recovery_ends_the_outage_and_the_next_failure_warns_again():
    log = OutageLog(interval_s=60)
    log.failed(0)
    log.failed(1)
    assert log.down and log.recovered() == 2 and not log.down
    assert log.recovered() == 0                          # nothing to recover from
    assert log.failed(5) == WARN and log.since == 5


@pytest.mark.parametrize("bad", [0, -1, float("nan")])
def test_the_interval_must_be_positive(bad):
    with pytest.raises(ValueError):
        OutageLog(bad)
