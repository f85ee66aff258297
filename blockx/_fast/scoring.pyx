# The dispatcher's executor choice (compiled; twin: scoring_py.py).
#
# select_executor picks the executor of a call: Filter, then Score. Filters run
# in a fixed order so filter_reason names the first one that rejects a view (the
# reason recorded in metrics and asserted in tests). The score prefers the
# executor with the fewest runnable calls (its scheduler is least busy), then
# the fewest calls this worker has in flight there, then the most headroom, and
# finally the smallest executor_id so the choice is deterministic. With
# sample_size > 0 only sample_size eligible views are scored (power-of-d
# choices: bounded cost per decision on large pools): the scan starts at view
# `start` and wraps around, and the caller draws `start` at random for each
# decision, so every executor can be sampled (a fixed start would only ever
# score the first sample_size eligible ones).
# Views are typed records so the scan reads C fields, not attributes.

cimport cython

__all__ = ["ExecutorView", "select_executor", "filter_reason"]

cdef enum:
    R_OK = 0
    R_UNHEALTHY = 1
    R_STALLED = 2
    R_NO_HEADROOM = 3
    R_RUNNABLE = 4
    R_INFLIGHT = 5
    R_MEMORY = 6

cdef tuple _REASONS = ("", "unhealthy", "stalled", "no_headroom", "runnable",
                       "inflight", "memory")


@cython.final
cdef class ExecutorView:
    """One executor's capacity as the dispatcher sees it (mutable, reused)."""

    def __init__(self, str executor_id not None, *, healthy=False, runnable=0,
                 local_inflight=0, usable_contexts=0, memory_bytes=0,
                 last_scheduler_active_at_ms=0, str running_call_id not None="",
                 heartbeat_seq=0):
        # Checked here because C integer conversion would silently truncate floats.
        for name, value in (("runnable", runnable), ("local_inflight", local_inflight),
                            ("usable_contexts", usable_contexts), ("memory_bytes", memory_bytes),
                            ("last_scheduler_active_at_ms", last_scheduler_active_at_ms),
                            ("heartbeat_seq", heartbeat_seq)):
            if not isinstance(value, int):
                raise TypeError(f"{name} must be int")
        self.executor_id = executor_id
        self.healthy = bool(healthy)
        self.runnable = runnable
        self.local_inflight = local_inflight
        self.usable_contexts = usable_contexts
        self.memory_bytes = memory_bytes
        self.last_scheduler_active_at_ms = last_scheduler_active_at_ms
        self.running_call_id = running_call_id
        self.heartbeat_seq = heartbeat_seq

    def __repr__(self):
        return (f"ExecutorView({self.executor_id!r}, healthy={self.healthy}, "
                f"runnable={self.runnable}, local_inflight={self.local_inflight}, "
                f"usable_contexts={self.usable_contexts}, memory_bytes={self.memory_bytes}, "
                f"last_scheduler_active_at_ms={self.last_scheduler_active_at_ms}, "
                f"running_call_id={self.running_call_id!r}, heartbeat_seq={self.heartbeat_seq})")


cdef inline int reject_code(ExecutorView v, long long now_ms, long long max_runnable,
                            long long max_inflight, long long memory_high_watermark,
                            long long stall_timeout_ms) except -1:
    if not v.healthy:
        return R_UNHEALTHY
    # Filter: a scheduler stalled longer than the stall timeout, running a
    # call or not (an idle one still wakes every poll, so it never looks stalled).
    if stall_timeout_ms > 0 and now_ms - v.last_scheduler_active_at_ms > stall_timeout_ms:
        return R_STALLED
    if v.usable_contexts - v.local_inflight <= 0:
        return R_NO_HEADROOM
    if max_runnable > 0 and v.runnable >= max_runnable:
        return R_RUNNABLE
    if max_inflight > 0 and v.local_inflight >= max_inflight:
        return R_INFLIGHT
    if memory_high_watermark > 0 and v.memory_bytes >= memory_high_watermark:
        return R_MEMORY
    return R_OK


cdef Py_ssize_t select_index(list views, long long now_ms, Py_ssize_t sample_size,
                             long long max_runnable, long long max_inflight,
                             long long memory_high_watermark,
                             long long stall_timeout_ms, Py_ssize_t start=0) except -2:
    cdef Py_ssize_t i, k, n = len(views), best = -1, seen = 0
    cdef long long run, inf, head, b_run = 0, b_inf = 0, b_head = 0
    cdef ExecutorView v, b = None
    if start < 0 or (start >= n and n > 0):
        raise ValueError(f"start must be an index into the {n} views, got {start}")
    i = start - 1
    for k in range(n):
        i += 1
        if i == n:
            i = 0
        v = views[i]
        if reject_code(v, now_ms, max_runnable, max_inflight,
                       memory_high_watermark, stall_timeout_ms) != R_OK:
            continue
        run = v.runnable
        inf = v.local_inflight
        head = v.usable_contexts - inf
        if (best < 0 or run < b_run
                or (run == b_run and (inf < b_inf
                    or (inf == b_inf and (head > b_head
                        or (head == b_head and v.executor_id < b.executor_id)))))):
            best = i
            b = v
            b_run = run
            b_inf = inf
            b_head = head
        seen += 1
        if sample_size > 0 and seen >= sample_size:
            break
    return best


def filter_reason(ExecutorView view not None, long long now_ms, long long max_runnable,
                  long long max_inflight, long long memory_high_watermark,
                  long long stall_timeout_ms) -> str:
    """"" when view may take a call, else the first filter that rejects it."""
    return _REASONS[reject_code(view, now_ms, max_runnable, max_inflight,
                                memory_high_watermark, stall_timeout_ms)]


def select_executor(views, long long now_ms, Py_ssize_t sample_size,
                    long long max_runnable, long long max_inflight,
                    long long memory_high_watermark, long long stall_timeout_ms,
                    Py_ssize_t start=0) -> int:
    """Index into views of the best eligible executor, or -1 if none is; the
    scan (and a sample) starts at views[start]."""
    if type(views) is not list:
        views = list(views)
    return select_index(<list>views, now_ms, sample_size, max_runnable, max_inflight,
                        memory_high_watermark, stall_timeout_ms, start)
