"""Retries (the backoff delay, ArmCallRetry) and retry-policy resolution.

The RetryScheduler decides when a call runs again and says why. After a
retryable failure of attempt n the delay is ``base * 2^(n-1)``, capped at
``max_backoff_ms`` (0 = no cap), plus a jitter of at most ``jitter_percent`` of
that delay: ``floor(delay * jitter_percent * r / 100)`` with ``r`` in [0, 1)
from the injected random source, so the jitter never reaches the full percent
and tests pin it exactly with a fixed ``r``. Jitter spreads retries of calls
that failed together (an executor loss fails all its calls at once). A call
whose bind failed consumed no attempt: it is re-queued at once and that is not
a retry (``ArmCallRetry.is_retry`` is false, call_retries unchanged).

The RetryScheduler only computes: the call's state (READY, ``retry_armed``)
is set by the CallLifecycle before it asks for the timer. A READY call with
``retry_armed`` set is owned by the adapter's timer; only the lifecycle's
``retry_ready`` hands it back, and only once (a timer of a call that ended or
was re-armed meanwhile finds the flag cleared).
"""
from __future__ import annotations

from typing import Any, Callable

from blockx.core.config import MAX_RETRY_JITTER_PERCENT
from blockx.core.dispatch.commands import ArmCallRetry
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.types import RetryPolicy

_MAX_SHIFT = 40  # 2^40 ms is ~35 years: far beyond any cap, and keeps ints small


def compute_backoff(attempt: int, base_ms: int, jitter_percent: int, rand: Callable[[], float],
                    max_backoff_ms: int = 0) -> int:
    """Delay in ms before retrying after failed attempt number ``attempt`` (1-based)."""
    if base_ms <= 0:
        return 0
    shift = attempt - 1
    if shift < 0:
        shift = 0
    elif shift > _MAX_SHIFT:
        shift = _MAX_SHIFT
    delay = base_ms << shift
    if 0 < max_backoff_ms < delay:
        delay = max_backoff_ms
    if jitter_percent > 0:
        r = rand()
        if not 0.0 <= r < 1.0:
            raise ValueError(f"rand() must return a float in [0, 1), got {r!r}")
        delay += int(delay * jitter_percent * r / 100)
    return delay


def resolve_retry(retry: RetryPolicy | tuple | None, config: DispatcherConfig) -> tuple[int, int, int]:
    """(max_attempts, base_backoff_ms, jitter_percent) for a task.

    No policy: every value from the config. With a policy: 0 max_attempts /
    base_backoff_ms fall back to the config; jitter_percent is used as given, and
    like the config's default it may not exceed MAX_RETRY_JITTER_PERCENT (5)."""
    if retry is None:
        return (config.default_max_attempts, config.base_backoff_ms,
                config.default_retry_jitter_percent)
    if isinstance(retry, RetryPolicy):
        m, b, j = retry.max_attempts, retry.base_backoff_ms, retry.jitter_percent
    else:
        try:
            m, b, j = retry
        except (TypeError, ValueError):
            raise ValueError("retry must be a RetryPolicy or a (max_attempts, base_backoff_ms, "
                             f"jitter_percent) tuple, got {retry!r}") from None
    for name, v in (("max_attempts", m), ("base_backoff_ms", b), ("jitter_percent", j)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"retry policy {name} must be an integer, got {v!r}")
        if v < 0:
            raise ValueError(f"retry policy {name} must be >= 0, got {v}")
    if j > MAX_RETRY_JITTER_PERCENT:
        raise ValueError(f"retry policy jitter_percent must be between 0 and {MAX_RETRY_JITTER_PERCENT}, got {j}")
    return (m or config.default_max_attempts, b or config.base_backoff_ms, j)


class RetryScheduler:
    __slots__ = ("_rand", "_max_backoff")

    def __init__(self, rand: Callable[[], float], max_backoff_ms: int) -> None:
        self._rand = rand
        self._max_backoff = max_backoff_ms

    @staticmethod
    def may_retry(call: Any, retryable: bool) -> bool:
        """A root's failed attempt gets another one (subcalls: MaxAttempts = 1)."""
        task = call.task
        return (retryable and call.parent is None and call.attempt_count < task.max_attempts
                and not task.stop_dispatching)

    def arm(self, call: Any, now: int, out: list) -> None:
        """The backoff after a retryably failed attempt (the lifecycle has put the
        call back to READY): a retry, counted in the task, and its timer."""
        task = call.task
        task.call_retries += 1
        delay = compute_backoff(call.attempt_count, task.base_backoff_ms, task.jitter_percent,
                                self._rand, self._max_backoff)
        out.append(ArmCallRetry(call.call_id, now + delay, True))

    @staticmethod
    def requeue(call: Any, now: int, out: list) -> None:
        """A failed bind: run again at once; no attempt was consumed."""
        out.append(ArmCallRetry(call.call_id, now, False))
