"""Large blocks go back to the system as soon as they are freed (glibc malloc).

Why: a request refused after it was decoded (INVALID_ARGUMENT, RESOURCE_EXHAUSTED)
frees its buffers at once (the message, its decoded payload: megabytes each), but
glibc's mmap threshold is dynamic: it rises to the largest block freed so far (up
to 32 MiB), and from then on blocks that large come from the heap, whose freed
space mostly stays in the process. Measured on a Worker: 100 refused 8 MiB
SubmitTask calls (4 at a time) left about 90 MB more RSS with the dynamic
threshold, about 20 MB with it fixed at 1 MiB. A fixed threshold maps every block
of 1 MiB or more on its own and unmaps it when it is freed.

``release_large_blocks`` is called once at start. It leaves the choice to the
operator when MALLOC_MMAP_THRESHOLD_ is set (glibc reads it itself), and does
nothing on a C library without ``mallopt`` (musl).

Smaller blocks (grpc's receive buffers, a request's parsed fields) are freed into
the heap of the thread that made them; ``trim`` (glibc's ``malloc_trim``) hands
the free pages of every heap back. The memory budget calls it after RSS grew by
TRIM_AFTER_GROWTH_BYTES (blockx.adapters.memory_budget), not on a hot path: it
walks the heaps (a few milliseconds for a large process)."""
from __future__ import annotations

import ctypes
import os

M_MMAP_THRESHOLD = -3          # glibc's mallopt parameter number
THRESHOLD_BYTES = 1024 * 1024
TRIM_AFTER_GROWTH_BYTES = 32 * 1024 * 1024


def _glibc():
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version          # glibc only: musl's mallopt does nothing
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _glibc()


def release_large_blocks(threshold: int = THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``threshold``; True when it was set here."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or _LIBC is None:
        return False
    mallopt = _LIBC.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, threshold) == 1


def trim() -> bool:
    """Give the heaps' free pages back to the system; True when glibc released some."""
    if _LIBC is None:
        return False
    t = _LIBC.malloc_trim
    t.argtypes = (ctypes.c_size_t,)
    t.restype = ctypes.c_int
    return t(0) == 1


__all__ = ["THRESHOLD_BYTES", "TRIM_AFTER_GROWTH_BYTES", "release_large_blocks", "trim"]
