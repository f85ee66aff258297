"""Budget preemption (--budget-preempt-ms; the Worker passes 50 ms unless
EXECUTOR_BUDGET_PREEMPT_MS=0): stop a call that overruns
its budget without yielding.

Greenlets are cooperative, so a call that spins in Python code never returns
to the scheduler for the budget check at its next wait. Rather than let it hold
the executor until the Worker's wedge backstop kills the whole process (and
every other call on it), a SIGALRM interval timer checks the running call every
`interval_ms`: once it is over budget, the handler raises BudgetExceeded in
that call's own frame, as Ctrl-C raises KeyboardInterrupt. The handler does
nothing unless the interrupted greenlet is the call's (never in the scheduler),
and repeats every tick while the overrun call keeps running, so code that
swallows BaseException cannot keep going for long. The call then reports
BUDGET_EXCEEDED like any other overrun. Code blocked inside a C function that
holds the GIL cannot be interrupted; the wedge backstop remains for that.

Signals are delivered to the main thread, which is the scheduler's thread; an
interrupted poll() is retried by Python (PEP 475)."""

from __future__ import annotations

import signal
import time

from greenlet import getcurrent

from .sdk import BudgetExceeded

_monotonic_ns = time.monotonic_ns


class BudgetPreemption:
    def __init__(self, scheduler, interval_ms: int):
        self.scheduler = scheduler
        self.interval_s = interval_ms / 1000.0
        self.fired = 0

    def start(self) -> None:
        signal.signal(signal.SIGALRM, self._on_alarm)
        signal.setitimer(signal.ITIMER_REAL, self.interval_s, self.interval_s)

    def stop(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    def _on_alarm(self, signum, frame) -> None:
        call = self.scheduler.running_call
        if call is None or not call.budget_ns or getcurrent() is not call.greenlet:
            return
        used = call.used_ns + (_monotonic_ns() - call.slice_start_ns)
        if used <= call.budget_ns:
            return
        if call.abort is None:
            call.abort = (BudgetExceeded, call.budget_message(used))
        self.fired += 1
        raise BudgetExceeded(call.abort[1])
