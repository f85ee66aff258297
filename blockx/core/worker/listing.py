"""ListTasks: the caller's view of the task index, filtered and paginated.

Rules:
- A non-admin caller sees only the tasks it owns (``core.owners``); an admin or
  the unrestricted caller sees every task. Tombstones of reservations that
  lapsed before SubmitTask are not tasks and are never listed.
- Each row names the task's state and phase: ``RESERVED`` (a bare
  reservation), ``PREPARING``, ``BUILDER``, ``CALLS``, ``PLUGIN`` while it is
  submitted, ``TERMINAL`` once it ended (its result is retained); its owner,
  instance id, slot, when it was reserved / accepted / finished, and its
  failure code once it failed. Call counts come from the dispatcher, which the
  adapter asks (the core does not hold them while calls run).
- Filters: any of ``states`` (TaskState), any of ``phases`` (names above), and
  an exact ``instance_id``; an empty filter matches everything.
- Rows are ordered by task id. ``page_size`` 0 means DEFAULT_PAGE_SIZE; a larger
  one than MAX_PAGE_SIZE is served as MAX_PAGE_SIZE; a negative one is
  InvalidArgument. ``next_page_token`` is opaque ("" on the last page): passing
  it back returns the rows after the last one returned, with the same filter.
  Tasks that appear or go between pages are seen or not, as a task id ordering
  allows; no row is ever returned twice by one walk.
- Cost: one pass over the index and a partial sort of one page
  (O(n log page_size)); ListTasks is an operator's verb, not a hot path.
"""
from __future__ import annotations

import base64
import binascii
import heapq
from dataclasses import dataclass, field
from typing import Iterable

from blockx.core.errors import InvalidArgumentError
from blockx.core.owners import Caller, may_use
from blockx.core.types import TaskIndexEntry, TaskPhase, TaskState

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
RESERVED = "RESERVED"
TERMINAL = "TERMINAL"
PHASES = (RESERVED, "PREPARING", "BUILDER", "CALLS", "PLUGIN", TERMINAL)
_TOKEN_PREFIX = b"after:"
MAX_PAGE_TOKEN_CHARS = 1024


@dataclass(slots=True)
class TaskListFilter:
    states: tuple[TaskState, ...] = ()
    phases: tuple[str, ...] = ()
    instance_id: str = ""
    page_size: int = 0
    page_token: str = ""


@dataclass(slots=True)
class TaskListing:
    task_id: str
    state: TaskState
    phase: str
    owner: str
    instance_id: str
    slot_id: str
    created_at_ms: int          # reserved (RESERVED) or accepted (submitted) at
    finished_at_ms: int         # 0 until terminal
    age_ms: int                 # now - created_at_ms
    failure_code: str
    calls_total: int | None     # None: the dispatcher holds the counts (Calls phase)
    calls_done: int | None


@dataclass(slots=True)
class TaskListPage:
    tasks: list[TaskListing] = field(default_factory=list)
    next_page_token: str = ""


def phase_of(entry: TaskIndexEntry) -> str:
    if entry.result is not None:
        return TERMINAL
    ctx = entry.ctx
    return RESERVED if ctx is None else ctx.phase.name


def encode_token(after: str) -> str:
    return base64.urlsafe_b64encode(_TOKEN_PREFIX + after.encode()).decode().rstrip("=")


def decode_token(token: str) -> str:
    """The task id a page token continues after ("" for no token)."""
    if not token:
        return ""
    bad = InvalidArgumentError(
        "page_token is not a token this worker issued: pass next_page_token of the previous "
        "ListTasks response unchanged, or omit it to start from the first page")
    if len(token) > MAX_PAGE_TOKEN_CHARS:
        raise bad
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        after = raw[len(_TOKEN_PREFIX):].decode() if raw.startswith(_TOKEN_PREFIX) else None
    except (binascii.Error, ValueError):
        after = None
    if not after:
        raise bad
    return after


def check_filter(query: TaskListFilter) -> int:
    """The page size to serve; InvalidArgument for a filter that cannot match as meant."""
    if query.page_size < 0:
        raise InvalidArgumentError(f"page_size is {query.page_size}: it must be 0 (the default, "
                                   f"{DEFAULT_PAGE_SIZE}) or positive (at most {MAX_PAGE_SIZE} are served)")
    for p in query.phases:
        if p not in PHASES:
            raise InvalidArgumentError(f"phases holds {p[:32]!r}, which is no phase: use one of "
                                       + ", ".join(PHASES))
    for s in query.states:
        if s not in tuple(TaskState):
            raise InvalidArgumentError(f"states holds {s!r}, which is no task state: use ALLOCATED, "
                                       "RUNNING, SUCCEEDED or FAILED")
    return min(query.page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def _row(e: TaskIndexEntry, phase: str, now: int) -> TaskListing:
    r = e.result
    ctx = e.ctx
    created = e.created_at_ms
    finished = 0
    code = ""
    total = done = None
    if r is not None:
        st = r.statistic
        created = st.accepted_at_ms or created
        finished = st.finished_at_ms
        code = r.failure_code
        total = done = st.call_count
    elif ctx is not None:
        created = ctx.accepted_at_ms
        calls = ctx.calls_outcome
        if calls is not None:             # the Calls phase reported: the counts are the core's now
            total = done = calls.call_count
        elif ctx.phase is not TaskPhase.CALLS:
            total = done = 0
    else:
        total = done = 0
    return TaskListing(e.task_id, e.state, phase, e.owner, e.instance_id, e.slot_id, created, finished,
                       max(0, now - created), code, total, done)


def list_tasks(entries: Iterable[TaskIndexEntry], query: TaskListFilter, now: int,
               caller: Caller | None) -> TaskListPage:
    size = check_filter(query)
    after = decode_token(query.page_token)
    states = frozenset(query.states)
    phases = frozenset(query.phases)
    instance = query.instance_id

    def matching():
        for e in entries:
            if e.lease_lost_at_ms >= 0 or not may_use(e.owner, caller):
                continue
            tid = e.task_id
            if after and tid <= after:
                continue
            if states and e.state not in states:
                continue
            if instance and e.instance_id != instance:
                continue
            if phases and phase_of(e) not in phases:
                continue
            yield e

    page = heapq.nsmallest(size + 1, matching(), key=lambda e: e.task_id)
    more = len(page) > size
    rows = [_row(e, phase_of(e), now) for e in page[:size]]
    return TaskListPage(rows, encode_token(rows[-1].task_id) if more else "")


__all__ = ["DEFAULT_PAGE_SIZE", "MAX_PAGE_SIZE", "PHASES", "TaskListFilter", "TaskListPage", "TaskListing",
           "decode_token", "encode_token", "list_tasks", "phase_of"]
