"""The executor capacity view the adapter hands to the orchestrator each tick.

`usable_contexts` rule (documented decision; the dispatcher computes
`headroom = usable_contexts - local_inflight`, so usable_contexts must NOT
already subtract the dispatcher's own in-flight calls):

    capacity        = ExecutorAdapter(executor_contexts=N) when N > 0: the
                      --executor-max-inflight every executor was started with;
                      else estimated per heartbeat as availableContexts +
                      inflightCount
    usable_contexts = max(0, capacity - draining reservations)
    free_contexts   = max(0, capacity - all reservations)   (what bind() checks)

Draining reservations are calls the dispatcher already considers finished
(cancelled) but that still occupy a context until the executor's terminal
frame: only the adapter knows them, so only it can subtract them. Every other
reservation is one of the dispatcher's own bound calls, already counted in
local_inflight (roots and subcalls alike, as the dispatcher counts them).
Using a capacity rather than "availableContexts minus reservations made since
the heartbeat" keeps heartbeat lag out of the arithmetic entirely.

The estimate is exact while no subcall runs and nothing queues: the Python executor reports
availableContexts = max_inflight - contexts in use - queued calls and
inflightCount = admitted calls, where a subcall shares its parent's context
but counts as admitted; so each subcall in flight at heartbeat time inflates
the estimate by one (excess root calls then queue in the executor until the
next heartbeat corrects it), and each queued call deflates it by one.
Configure executor_contexts to avoid both.

`last_scheduler_active_at_ms` is translated into the adapter's clock
(clock_ms at receipt minus the executor-side age `sentAtMs -
lastSchedulerActiveAtMs`), so the wedge check compares numbers from one clock
even if the executor's clock differs from the Worker's."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ExecutorSnapshotData:
    executor_id: str
    healthy: bool
    runnable_count: int
    inflight_count: int
    usable_contexts: int
    memory_bytes: int
    heartbeat_seq: int
    running_call_id: str
    last_scheduler_active_at_ms: int
    pid: int
    attached_at_ms: int
    # extensions
    capacity: int = 0
    free_contexts: int = 0
    reserved_count: int = 0
    draining_count: int = 0
    last_heartbeat_at_ms: int = 0
    cpu_user_ms: int = 0
    cpu_system_ms: int = 0
