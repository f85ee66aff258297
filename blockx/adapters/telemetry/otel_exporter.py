"""The exporter process of a Worker that exports OpenTelemetry spans:
``python -m blockx.adapters.telemetry.otel_exporter SERVICE``.

It reads batches of task records (otel_spans.py) from stdin, one JSON array a
line, turns the sampled ones into the SDK's spans (otel_replay.py) and hands
them to the SDK's batch span processor in front of the OTLP/gRPC exporter,
whose settings are the standard OTEL_* variables it inherits. When stdin ends
(the Worker closed it, or exited) it flushes what it holds and exits. Signals
meant for the Worker's process group (Ctrl-C) do not end it before that."""
from __future__ import annotations

import logging
import signal
import sys


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="blockx otel exporter: %(levelname)s %(name)s: %(message)s")
    import orjson
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from blockx.adapters.telemetry.otel_export import resource, sampler
    from blockx.adapters.telemetry.otel_replay import SpanReplay

    service = argv[0] if argv else "blockx-worker"
    processor = BatchSpanProcessor(OTLPSpanExporter())
    replay = SpanReplay(processor, resource(service), sampler())
    try:
        for line in sys.stdin.buffer:
            try:
                replay.batch(orjson.loads(line))
            except Exception:  # noqa: BLE001 - one bad batch must not stop the export
                logging.getLogger("blockx.otel").exception("a batch of task records could not be exported")
    finally:
        processor.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
