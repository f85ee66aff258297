"""The bounds of the gRPC side, as one value the server is built with.

Each field is a setting of WorkerFullConfig (the same name in camelCase; see
docs/configuration.md) and each bound refuses what is past it with a status the
API defines:

- ``max_message_bytes``: the largest message sent or received. A request over it
  is refused by grpc (RESOURCE_EXHAUSTED); a result over it is not delivered,
  and only its own delivery fails (blockx.adapters.grpc.result_delivery).
- ``result_page_bytes``: the largest message that carries a result (a page of
  it, blockx.adapters.grpc.result_pages); at most max_message_bytes - 16 KiB.
- ``max_concurrent_streams``: HTTP/2 streams at once on one client connection
  (``grpc.max_concurrent_streams``); the client's further RPCs wait for one.
- ``max_concurrent_rpcs``: RPCs in progress across all connections (grpc's
  ``maximum_concurrent_rpcs``); past it grpc answers RESOURCE_EXHAUSTED
  "Concurrent RPC limit exceeded!".
- ``max_connections``: client connections at once
  (``grpc.max_allowed_incoming_connections``); a connection past it is closed.
- ``max_task_sessions``, ``max_watch_streams``: TaskSession / WatchTasks streams
  open at once (blockx.adapters.grpc.open_streams), refused RESOURCE_EXHAUSTED.
- ``watch_max_pending_updates``: a WatchTasks stream's queue (its overflow ends
  that stream RESOURCE_EXHAUSTED).
- ``max_task_sessions_per_identity``, ``max_watch_streams_per_identity``: the
  same streams of one identity (its fair share; admin and the unrestricted
  caller are not limited), refused RESOURCE_EXHAUSTED.
- ``memory_budget_bytes``: the Worker's resident memory past which new work is
  refused (blockx.adapters.memory_budget); 0 derives it.
"""
from __future__ import annotations

from dataclasses import dataclass

from blockx.adapters.subscriptions import DEFAULT_MAX_PENDING
from blockx.core.config_rules import Rule

MiB = 1024 * 1024
# The rules of the settings GrpcLimits is built from, under their WorkerFullConfig
# names (from_config); resultPageBytes' rules are result_pages'.
GRPC_RULES = (
    Rule("grpc_max_message_bytes", 64 * 1024, 2**31 - 1, note="grpc takes a 32-bit size"),
    Rule("grpc_max_concurrent_streams", 1),
    Rule("grpc_max_concurrent_rpcs", 1),
    Rule("grpc_max_connections", 1),
    Rule("max_task_sessions", 1),
    Rule("max_watch_streams", 1),
    Rule("watch_max_pending_updates", 1),
    Rule("max_task_sessions_per_identity", 1),
    Rule("max_watch_streams_per_identity", 1),
    Rule("memory_budget_bytes", 0, note="0 = 80% of the memory limit"),
)


@dataclass(frozen=True, slots=True)
class GrpcLimits:
    max_message_bytes: int = 64 * MiB
    max_concurrent_streams: int = 1_000
    max_concurrent_rpcs: int = 10_000
    max_connections: int = 1_000
    max_task_sessions: int = 1_000
    max_watch_streams: int = 1_000
    watch_max_pending_updates: int = DEFAULT_MAX_PENDING
    result_page_bytes: int = MiB
    max_task_sessions_per_identity: int = 16
    max_watch_streams_per_identity: int = 256
    memory_budget_bytes: int = 0

    @classmethod
    def from_config(cls, cfg) -> "GrpcLimits":
        """From a WorkerFullConfig."""
        return cls(cfg.grpc_max_message_bytes, cfg.grpc_max_concurrent_streams, cfg.grpc_max_concurrent_rpcs,
                   cfg.grpc_max_connections, cfg.max_task_sessions, cfg.max_watch_streams,
                   cfg.watch_max_pending_updates, cfg.result_page_bytes, cfg.max_task_sessions_per_identity,
                   cfg.max_watch_streams_per_identity, cfg.memory_budget_bytes)

    def server_options(self) -> list[tuple[str, int]]:
        return [("grpc.max_receive_message_length", self.max_message_bytes),
                ("grpc.max_send_message_length", self.max_message_bytes),
                ("grpc.max_concurrent_streams", self.max_concurrent_streams),
                ("grpc.max_allowed_incoming_connections", self.max_connections)]
