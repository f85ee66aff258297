"""A real OTLP/gRPC trace receiver for the tests: a grpc server implementing
opentelemetry.proto.collector.trace.v1 TraceService/Export on 127.0.0.1, which
keeps every span it is sent with its resource's attributes, so a test can point
a real Worker's OTEL_EXPORTER_OTLP_ENDPOINT at it and read what arrived.

``python -m tests.support.otlp_receiver`` runs one in a process of its own (the
benchmark's, so that receiving costs neither the worker nor the measuring
client): it prints its port, counts what it receives and prints the count of
spans on each line read from stdin, until stdin closes."""
from __future__ import annotations

import threading
import time
from concurrent import futures
from dataclasses import dataclass
from typing import Callable

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts_pb
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as ts_grpc


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str          # 32 hex digits
    span_id: str           # 16 hex digits
    parent_span_id: str    # "" for a root
    status_code: int       # opentelemetry.proto.trace.v1.Status.StatusCode: 0 unset, 1 ok, 2 error
    status_message: str
    attributes: dict
    resource: dict


def _value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class OtlpReceiver(ts_grpc.TraceServiceServicer):
    def __init__(self, *, keep: bool = True) -> None:
        self.keep = keep               # False: count the spans only
        self.spans: list[ReceivedSpan] = []
        self.received = 0
        self.requests = 0
        self._cond = threading.Condition()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        ts_grpc.add_TraceServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "OtlpReceiver":
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(0)

    def Export(self, request, context):  # noqa: N802 - the generated servicer's name
        if not self.keep:
            n = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
            with self._cond:
                self.requests += 1
                self.received += n
            return ts_pb.ExportTraceServiceResponse()
        got = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append(ReceivedSpan(
                        name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(), status_code=s.status.code,
                        status_message=s.status.message,
                        attributes={a.key: _value(a.value) for a in s.attributes}, resource=resource))
        with self._cond:
            self.requests += 1
            self.received += len(got)
            self.spans.extend(got)
            self._cond.notify_all()
        return ts_pb.ExportTraceServiceResponse()

    def wait_for(self, pred: Callable[[list[ReceivedSpan]], bool], timeout: float = 20.0) -> list[ReceivedSpan]:
        """Every span received so far, once ``pred`` holds for them."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not pred(self.spans):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"the receiver did not get the spans awaited in {timeout}s; "
                                         f"it has {[(s.name, s.trace_id) for s in self.spans]}")
                self._cond.wait(left)
            return list(self.spans)


def main() -> None:
    import sys
    r = OtlpReceiver(keep=False).start()
    print(r.port, flush=True)
    for _ in sys.stdin:
        print(r.received, flush=True)
    r.stop()


if __name__ == "__main__":
    main()
