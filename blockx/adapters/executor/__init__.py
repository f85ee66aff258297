"""Executor side of the Worker: the UDS adapter (listener, connections,
reservations, snapshots) and the pool manager (spawn, restart, backoff, kill)."""

from .adapter import ExecutorAdapter, monotonic_ms
from .errors import (BindError, CallNotBound, ExecutorAdapterError, ExecutorGone, OutboxClosed,
                     OutboxFull, SocketPathError)
from .pool import DEFAULT_ENV_ALLOWLIST, PoolManager, SlotInfo, ExecutorSlotState
from .snapshot import ExecutorSnapshotData

__all__ = [
    "BindError", "CallNotBound", "DEFAULT_ENV_ALLOWLIST", "ExecutorAdapter",
    "ExecutorAdapterError", "ExecutorGone", "ExecutorSnapshotData", "OutboxClosed", "OutboxFull",
    "PoolManager", "SlotInfo", "ExecutorSlotState", "SocketPathError", "monotonic_ms",
]
