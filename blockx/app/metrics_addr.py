"""The metrics address a Worker advertises in its heartbeat (metricsAddr): where
Prometheus reaches its /metrics, built from metricsListen and the port it bound.
A wildcard or empty host (0.0.0.0, ::) is not reachable as such, so the host of
workerAddr, the address the fleet already reaches the Worker at, stands in."""
from __future__ import annotations

_WILDCARDS = ("", "0.0.0.0", "::", "[::]")


def advertised_metrics_addr(listen: str, port: int, worker_addr: str) -> str:
    if not listen or not port:
        return ""
    host = listen.rpartition(":")[0] if ":" in listen else listen
    if host in _WILDCARDS:
        host = worker_addr.rpartition(":")[0] if ":" in worker_addr else worker_addr
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"
