"""MemoryBudget: the Worker-wide memory past which new work is refused.

The budget is memoryBudgetBytes (WORKER_MEMORY_BUDGET_BYTES); 0, the default,
derives it: 80% of the cgroup's memory limit when the Worker runs under one
(the smallest ``memory.max`` (v2) or ``memory.limit_in_bytes`` (v1) of its
cgroup, from /proc/self/cgroup, and the cgroups above it), else 80% of the
host's MemTotal. The process's resident memory (``/proc/self/statm``) is read every
REFRESH_S on the event loop, not per call. While it is at or over the budget,
new work is refused RESOURCE_EXHAUSTED with ``refusal()``, which names the budget
and its setting: SubmitTask, RequestTaskSlot and a new TaskSession before their
request is read (blockx.adapters.grpc.call_gate), and a session's submit and
request_slot operations. Reads (GetTaskResult, WatchTasks, CancelTask, ListTasks)
are still answered, so clients take their results and the Worker's memory goes
down as its tasks end. Refusing at the budget, below the limit the kernel
enforces, is what keeps the Worker from an OOM kill: past the limit the kernel
kills the process with every task in it.

After RSS grew by heap_release.TRIM_AFTER_GROWTH_BYTES since the last look, the
freed heap pages are handed back (``heap_release.trim``), so what refused or
finished requests freed does not count against the budget."""
from __future__ import annotations

import asyncio
import logging
import os

from blockx.adapters import heap_release

log = logging.getLogger("blockx.memory")

REFRESH_S = 0.25
DEFAULT_PERCENT = 80
SETTING = "memoryBudgetBytes, WORKER_MEMORY_BUDGET_BYTES"
CONFIGURED = "as configured"
_PAGE = os.sysconf("SC_PAGE_SIZE")
_CGROUP_ROOT = "/sys/fs/cgroup"
_NO_LIMIT = 1 << 60            # cgroup v1 reports "no limit" as a huge number


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _limit_files(cgroup_text: str) -> list[str]:
    """The memory limit files of this process's cgroups and of every cgroup above them."""
    out = []
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":                                   # v2: 0::/path
            base, name = _CGROUP_ROOT, "memory.max"
        elif "memory" in controllers.split(","):                # v1: N:memory:/path
            base, name = f"{_CGROUP_ROOT}/memory", "memory.limit_in_bytes"
        else:
            continue
        path = path.rstrip("/")
        while True:
            out.append(f"{base}{path}/{name}")
            if not path:
                break
            path = path.rpartition("/")[0]
    return out


def memory_limit() -> tuple[int, str]:
    """(bytes, where from): the smallest cgroup memory limit, else the host's MemTotal."""
    best: tuple[int, str] | None = None
    for path in _limit_files(_read("/proc/self/cgroup") or ""):
        text = (_read(path) or "").strip()
        if text.isdigit() and 0 < int(text) < _NO_LIMIT and (best is None or int(text) < best[0]):
            best = int(text), f"the cgroup memory limit ({path})"
    if best is not None:
        return best
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024, "the host's MemTotal"
    return 0, "no known limit"


def resolve_budget(configured: int) -> tuple[int, str]:
    """(budget bytes, how it was chosen) for memoryBudgetBytes ``configured`` (0: derived)."""
    if configured > 0:
        return configured, CONFIGURED
    limit, source = memory_limit()
    if limit <= 0:
        return 0, "off: no memory limit is known"
    return limit * DEFAULT_PERCENT // 100, f"{DEFAULT_PERCENT}% of {source}"


def rss_bytes(fd: int) -> int:
    """Resident memory of this process from an open /proc/self/statm."""
    return int(os.pread(fd, 128, 0).split()[1]) * _PAGE


def _mb(n: int) -> str:
    return f"{n / (1024 * 1024):.0f} MB"


class MemoryBudget:
    """See the module docstring. ``over`` is read by the call gate on every new call."""

    __slots__ = ("budget", "source", "rss", "over", "refusals", "_fd", "_handle", "_trimmed_at", "_loop")

    def __init__(self, budget: int, source: str = CONFIGURED) -> None:
        self.budget = budget           # 0: off
        self.source = source
        self.rss = 0
        self.over = False
        self.refusals = 0
        self._fd = os.open("/proc/self/statm", os.O_RDONLY)
        self._handle: asyncio.TimerHandle | None = None
        self._trimmed_at = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self.refresh()

    @classmethod
    def from_config(cls, configured: int) -> "MemoryBudget":
        budget, source = resolve_budget(configured)
        return cls(budget, source)

    def refresh(self) -> None:
        rss = rss_bytes(self._fd)
        if rss - self._trimmed_at >= heap_release.TRIM_AFTER_GROWTH_BYTES:
            heap_release.trim()
            rss = rss_bytes(self._fd)
            self._trimmed_at = rss
        elif rss < self._trimmed_at:
            self._trimmed_at = rss
        self.rss = rss
        over = 0 < self.budget <= rss
        if over != self.over:
            self.over = over
            log.warning("memory_budget_" + ("reached" if over else "cleared"), extra={
                "event": "memory_budget_" + ("reached" if over else "cleared"),
                "fields": {"rss_bytes": rss, "budget_bytes": self.budget, "budget": self.source}})

    def refusal(self) -> str | None:
        """The refusal of new work while over the budget, else None (the call gate's hook)."""
        if not self.over:
            return None
        self.refusals += 1
        return (f"the worker is over its memory budget: {_mb(self.rss)} resident of {_mb(self.budget)} "
                f"({SETTING}: {self.source}), so it takes no new work until its running tasks free memory; "
                "retry later or on another worker")

    # ---- the refresh timer on the loop -------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._tick()

    def _tick(self) -> None:
        try:
            self.refresh()
        except (OSError, ValueError, IndexError):     # /proc unreadable: keep the last reading
            log.exception("reading the worker's memory failed")
        assert self._loop is not None
        self._handle = self._loop.call_later(REFRESH_S, self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


__all__ = ["DEFAULT_PERCENT", "MemoryBudget", "REFRESH_S", "SETTING", "memory_limit", "resolve_budget"]
