"""Shadow forwarding: after a primary SubmitTask succeeded, mirror the request to
another Worker at a sampling rate (SHADOW_SUBMIT_TARGET_ADDR).

The copy is marked `shadow=true`; the receiver strips its ResultHandler so a
mirrored task never writes results twice, and never forwards it again. Forwarding
is fire-and-forget: a slow or dead shadow target must not slow the primary path,
so at most `max_inflight` copies are in flight and extra ones are dropped (counted).
Every copy carries the forwarder's bearer token (``token``), so a target with
WORKER_AUTH_MODE=token accepts it; the copy then belongs to that identity there.
A copy also carries the W3C trace context it is handed (traceparent, tracestate),
so the shadow task joins the primary's trace."""
from __future__ import annotations

import asyncio
import logging
import random
from typing import Callable

import grpc

from blockx.credentials import auth_metadata
from blockx.tls.client_tls import ClientTLS, aio_channel
from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc

log = logging.getLogger("blockx.shadow")


class ShadowForwarder:
    def __init__(self, target_addr: str, sample_rate: float, *, timeout_s: float = 5.0,
                 max_inflight: int = 64, rand: Callable[[], float] = random.random,
                 tls: ClientTLS | None = None, token: str | None = None) -> None:
        self._target = target_addr
        self._tls = tls
        self._metadata = auth_metadata(token)
        self._rate = sample_rate
        self._timeout = timeout_s
        self._max_inflight = max_inflight
        self._rand = rand
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.WorkerServiceStub | None = None
        self._inflight: set[asyncio.Task] = set()
        self.failed = 0
        self.dropped = 0

    @property
    def enabled(self) -> bool:
        return bool(self._target) and self._rate > 0

    def maybe_forward(self, request: pb.SubmitTaskRequest, trace_context=None) -> None:
        """``trace_context``: checked W3C metadata pairs (trace_context.py) the copy carries, or None."""
        if not self.enabled or request.task.shadow or self._rand() >= self._rate:
            return
        if len(self._inflight) >= self._max_inflight:
            self.dropped += 1
            return
        if self._stub is None:
            self._channel = aio_channel(self._target, self._tls)
            self._stub = pb_grpc.WorkerServiceStub(self._channel)
        copy = pb.SubmitTaskRequest()
        copy.CopyFrom(request)
        copy.slot_id = ""                   # the target reserves its own slot inline
        copy.task.shadow = True
        metadata = self._metadata
        if trace_context:
            metadata = (*(metadata or ()), *trace_context)
        t = asyncio.get_running_loop().create_task(self._send(self._stub, copy, metadata))
        self._inflight.add(t)
        t.add_done_callback(self._inflight.discard)

    async def _send(self, stub: pb_grpc.WorkerServiceStub, req: pb.SubmitTaskRequest, metadata) -> None:
        try:
            await stub.SubmitTask(req, timeout=self._timeout, metadata=metadata)
        except grpc.aio.AioRpcError as err:
            self.failed += 1
            log.warning("shadow submit of %s to %s failed: %s: %s", req.task.task_id, self._target,
                        err.code().name, err.details())
        except Exception:  # noqa: BLE001 - a shadow failure must never reach the primary path
            self.failed += 1
            log.exception("shadow submit of %s to %s failed", req.task.task_id, self._target)

    async def close(self) -> None:
        for t in list(self._inflight):
            t.cancel()
        if self._channel is not None:
            await self._channel.close()
