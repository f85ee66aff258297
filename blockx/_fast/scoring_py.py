"""Pure-Python twin of blockx._fast.scoring: the dispatcher's executor choice.

select_executor picks the executor of a call: Filter, then Score. Filters run
in a fixed order so filter_reason names the first one that rejects a view (the
reason recorded in metrics and asserted in tests). The score prefers the
executor with the fewest runnable calls (its scheduler is least busy), then the
fewest calls this worker has in flight there, then the most headroom, and
finally the smallest executor_id so the choice is deterministic. With
sample_size > 0 only sample_size eligible views are scored (power-of-d
choices: bounded cost per decision on large pools): the scan starts at view
`start` and wraps around, and the caller draws `start` at random for each
decision, so every executor can be sampled (a fixed start would only ever
score the first sample_size eligible ones)."""

__all__ = ["ExecutorView", "select_executor", "filter_reason"]

_INT_FIELDS = ("runnable", "local_inflight", "usable_contexts", "memory_bytes",
               "last_scheduler_active_at_ms", "heartbeat_seq")


class ExecutorView:
    """One executor's capacity as the dispatcher sees it (mutable, reused)."""

    __slots__ = ("executor_id", "healthy", "runnable", "local_inflight",
                 "usable_contexts", "memory_bytes", "last_scheduler_active_at_ms",
                 "running_call_id", "heartbeat_seq")

    def __init__(self, executor_id: str, *, healthy: bool = False, runnable: int = 0,
                 local_inflight: int = 0, usable_contexts: int = 0, memory_bytes: int = 0,
                 last_scheduler_active_at_ms: int = 0, running_call_id: str = "",
                 heartbeat_seq: int = 0) -> None:
        if not isinstance(executor_id, str):
            raise TypeError(f"executor_id must be str, not {type(executor_id).__name__}")
        if not isinstance(running_call_id, str):
            raise TypeError(f"running_call_id must be str, not {type(running_call_id).__name__}")
        self.executor_id = executor_id
        self.healthy = bool(healthy)
        self.runnable = runnable
        self.local_inflight = local_inflight
        self.usable_contexts = usable_contexts
        self.memory_bytes = memory_bytes
        self.last_scheduler_active_at_ms = last_scheduler_active_at_ms
        self.running_call_id = running_call_id
        self.heartbeat_seq = heartbeat_seq
        for name in _INT_FIELDS:
            if not isinstance(getattr(self, name), int):
                raise TypeError(f"{name} must be int")

    def __repr__(self) -> str:
        return (f"ExecutorView({self.executor_id!r}, healthy={self.healthy}, "
                f"runnable={self.runnable}, local_inflight={self.local_inflight}, "
                f"usable_contexts={self.usable_contexts}, memory_bytes={self.memory_bytes}, "
                f"last_scheduler_active_at_ms={self.last_scheduler_active_at_ms}, "
                f"running_call_id={self.running_call_id!r}, heartbeat_seq={self.heartbeat_seq})")


def filter_reason(view: ExecutorView, now_ms: int, max_runnable: int, max_inflight: int,
                  memory_high_watermark: int, stall_timeout_ms: int) -> str:
    """"" when view may take a call, else the first filter that rejects it."""
    if not view.healthy:
        return "unhealthy"
    # Filter: a scheduler stalled longer than the stall timeout, running a
    # call or not (an idle one still wakes every poll, so it never looks stalled).
    if stall_timeout_ms > 0 and now_ms - view.last_scheduler_active_at_ms > stall_timeout_ms:
        return "stalled"
    if view.usable_contexts - view.local_inflight <= 0:
        return "no_headroom"
    if max_runnable > 0 and view.runnable >= max_runnable:
        return "runnable"
    if max_inflight > 0 and view.local_inflight >= max_inflight:
        return "inflight"
    if memory_high_watermark > 0 and view.memory_bytes >= memory_high_watermark:
        return "memory"
    return ""


def select_executor(views: list, now_ms: int, sample_size: int, max_runnable: int,
                    max_inflight: int, memory_high_watermark: int,
                    stall_timeout_ms: int, start: int = 0) -> int:
    """Index into views of the best eligible executor, or -1 if none is; the
    scan (and a sample) starts at views[start]."""
    if type(views) is not list:
        views = list(views)
    n = len(views)
    if start < 0 or (start >= n and n > 0):
        raise ValueError(f"start must be an index into the {n} views, got {start}")
    best = -1
    b_run = b_inf = b_head = 0
    b_id = ""
    seen = 0
    i = start - 1
    for _ in range(n):
        i += 1
        if i == n:
            i = 0
        v = views[i]
        if filter_reason(v, now_ms, max_runnable, max_inflight,
                         memory_high_watermark, stall_timeout_ms):
            continue
        run = v.runnable
        inf = v.local_inflight
        head = v.usable_contexts - inf
        if (best < 0 or run < b_run
                or (run == b_run and (inf < b_inf
                    or (inf == b_inf and (head > b_head
                        or (head == b_head and v.executor_id < b_id)))))):
            best, b_run, b_inf, b_head, b_id = i, run, inf, head, v.executor_id
        seen += 1
        if sample_size > 0 and seen >= sample_size:
            break
    return best
