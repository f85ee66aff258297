"""`blockx workers --prometheus-sd`: the registry as a Prometheus file_sd target
list (JSON): one target group per Worker that advertises metricsAddr in its
heartbeat, labelled with workerId (its registry address), deployment, and zone /
instance when its heartbeat has them."""
from __future__ import annotations

from typing import Any


def prometheus_sd(infos) -> list[dict[str, Any]]:
    """file_sd target groups: one per worker that advertises metricsAddr."""
    groups = []
    for w in sorted(infos, key=lambda w: w.addr):
        hb = w.heartbeat
        target = hb.get("metricsAddr")
        if not isinstance(target, str) or not target:
            continue
        labels = {"workerId": w.addr}
        for key in ("deployment", "zone", "instance"):
            v = hb.get(key)
            if isinstance(v, str) and v:
                labels[key] = v
        groups.append({"targets": [target], "labels": labels})
    return groups
