"""Resource limits an executor puts on itself at start (the Worker passes them
in sandbox mode: EXECUTOR_MEMORY_LIMIT_MB, EXECUTOR_MAX_PROCESSES,
EXECUTOR_MAX_OPEN_FILES), before any user code runs. Soft and hard limits are
both set, so user code cannot raise them again.

- memory -> RLIMIT_AS: an allocation past it raises MemoryError in the call,
  which fails with a message naming the limit while the executor carries on.
  (Where the Worker also puts the executor in a cgroup, the cgroup's memory
  limit is the backstop for memory RLIMIT_AS does not see, e.g. the tmpfs /tmp.)
- processes -> RLIMIT_NPROC: counted per user by the kernel and not enforced for
  root, so the Worker's cgroup pids limit is what holds when it runs as root.
- open files -> RLIMIT_NOFILE."""

from __future__ import annotations

import resource

MiB = 1024 * 1024

memory_limit_mb = 0      # read by failure.py to name the limit in a MemoryError


def apply(memory_mb: int, processes: int, open_files: int) -> None:
    global memory_limit_mb
    for res, value in ((resource.RLIMIT_AS, memory_mb * MiB), (resource.RLIMIT_NPROC, processes),
                       (resource.RLIMIT_NOFILE, open_files)):
        if value > 0:
            resource.setrlimit(res, (value, value))
    memory_limit_mb = memory_mb
