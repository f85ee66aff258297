"""The size of each executor connection's write outbox (blockx/_fast/outbox):
at most OUTBOX_DEPTH frames queued before a frame that may be refused (a
HeartbeatAck) is, and OUTBOX_MAX_BATCH frames per flush, one flush per loop
iteration.

ExecuteCalls are never refused for room (Outbox.push): the dispatcher bounds
the calls one executor holds by dispatcher.executorMaxInflight, and the config
keeps that bound within OUTBOX_DEPTH, so a burst to one executor stays within
what the outbox was sized for and drains in a few iterations."""
from __future__ import annotations

from typing import Final

OUTBOX_DEPTH: Final = 256
OUTBOX_MAX_BATCH: Final = 64


def inflight_problem(inflight: object, setting: str) -> str | None:
    """The rule of dispatcher.executorMaxInflight (named `setting` in the message):
    at most OUTBOX_DEPTH calls sent to one executor at once."""
    if type(inflight) is int and inflight > OUTBOX_DEPTH:
        return (f"{setting} ({inflight}) must not exceed the executor outbox depth ({OUTBOX_DEPTH} frames): "
                f"it is how many calls one executor may be sent at once; set it to at most {OUTBOX_DEPTH} "
                "(more executors, executorCount, carry more calls in flight)")
    return None
