"""OutageLog: how loudly to report a dependency that is down (etcd, for the
publisher), so an outage reads as one event and not as a wall of lines.

One WARNING when it goes down (the first failed attempt), then at most one line
every ``interval_s`` (a minute by default) with the count of failed attempts
and how long it has been down, at INFO: the WARNING already said it. Once an
attempt succeeds, ``recovered`` says so (the caller logs it at INFO) and the
next failure is a new outage with its own WARNING. It holds no clock: the caller
passes ``now`` (monotonic seconds), which also lets a test walk through an hour
of outage without waiting for it."""

from __future__ import annotations

WARN = "warn"          # the outage began: log a WARNING
REMIND = "remind"      # still down, a reminder is due: log one INFO line with the counts
QUIET = ""             # still down, a reminder was logged recently: nothing


class OutageLog:
    def __init__(self, interval_s: float = 60.0) -> None:
        if not interval_s > 0:
            raise ValueError(f"the outage log interval must be > 0 s, got {interval_s}")
        self.interval_s = interval_s
        self.failures = 0            # failed attempts in the current outage
        self.since = 0.0             # when the outage began (the caller's clock)
        self._last_line = 0.0
        self.quiet = 0               # failures not logged since the last line

    @property
    def down(self) -> bool:
        return self.failures > 0

    def failed(self, now: float) -> str:
        """A failed attempt at ``now``: WARN, REMIND or QUIET."""
        self.failures += 1
        if self.failures == 1:
            self.since = self._last_line = now
            self.quiet = 0
            return WARN
        if now - self._last_line >= self.interval_s:
            self._last_line = now
            self.quiet = 0
            return REMIND
        self.quiet += 1
        return QUIET

    def recovered(self) -> int:
        """An attempt succeeded: the failures of the outage that ended (0: there was none)."""
        failures, self.failures, self.quiet = self.failures, 0, 0
        return failures
