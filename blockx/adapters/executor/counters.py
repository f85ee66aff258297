"""The metric counters the executor adapter and pool bump.

They are plain int attributes of blockx.adapters.telemetry.metrics.Metrics (bumped on the
hot path, exported at scrape time). When no Metrics object is wired in, this
stand-in with the same attribute names takes the bumps, so the hot path never
tests `if metrics is not None`."""

from __future__ import annotations


# Why an executor's attach was refused: the label values of
# blockx_executor_attach_refused_total (a wrong private socket, an id already
# attached, an unknown id or a wrong or missing attach secret).
ATTACH_REFUSAL_KINDS = ("private_socket", "already_attached", "credentials")


class LocalCounters:
    __slots__ = ("uds_frames_in", "uds_frames_out", "uds_bytes_in", "uds_bytes_out",
                 "executor_restarts", "executor_limit_kills", "executor_attach_refused",
                 "executor_frames_refused")

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)
        self.executor_limit_kills: dict[str, int] = {}
        self.executor_attach_refused: dict[str, int] = {}


def counters_for(metrics):
    return metrics if metrics is not None else LocalCounters()
