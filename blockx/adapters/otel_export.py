"""When and how the Worker exports OpenTelemetry spans over OTLP/gRPC.

Export is on when OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is set and
OTEL_SDK_DISABLED is not true, nor OTEL_TRACES_EXPORTER none; otherwise the
Worker builds nothing and imports no OpenTelemetry module (its hooks are one
``is not None`` branch each). Everything else is the SDK's own reading of the
standard variables: the exporter's (endpoint, OTEL_EXPORTER_OTLP_INSECURE,
_HEADERS, _TIMEOUT, _CERTIFICATE, ...), the sampler's (OTEL_TRACES_SAMPLER,
_ARG), the batch span processor's (OTEL_BSP_*) and the resource's
(OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME). The service name is the
profile's unless those set one."""
from __future__ import annotations

import os
from collections.abc import Mapping

from blockx import __version__

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def requested(env: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for OTLP span export."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(env.get(name, "").strip() for name in ENDPOINT_VARS)


def task_spans(service: str, call_span_rate: float, *, exporter=None):
    """The TaskSpans of a Worker exporting over OTLP/gRPC (``exporter``: another
    SpanExporter, e.g. a test's in-memory one, behind the same batch processor)."""
    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from blockx.adapters.otel_spans import TaskSpans

    if exporter is None:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        exporter = OTLPSpanExporter()
    from_env = OTELResourceDetector().detect().attributes
    attrs = {}
    if not from_env.get(SERVICE_NAME):
        attrs[SERVICE_NAME] = service
    if not from_env.get(SERVICE_VERSION):
        attrs[SERVICE_VERSION] = __version__
    provider = TracerProvider(resource=Resource.create(attrs))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return TaskSpans(provider, call_span_rate=call_span_rate)
