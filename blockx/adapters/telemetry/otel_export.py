"""When and how the Worker exports OpenTelemetry spans over OTLP/gRPC.

Export is on when OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is set and
OTEL_SDK_DISABLED is not true, nor OTEL_TRACES_EXPORTER none; otherwise the
Worker builds nothing (its hooks are one ``is not None`` branch each) and no
OpenTelemetry module is imported anywhere.

When on, the SDK runs in an exporter process of its own (otel_exporter.py,
started by otel_pipe.py), which inherits the Worker's environment, so
everything else is the SDK's own reading of the standard variables: the
exporter's (endpoint, OTEL_EXPORTER_OTLP_INSECURE, _HEADERS, _TIMEOUT,
_CERTIFICATE, _COMPRESSION, ...), the sampler's (OTEL_TRACES_SAMPLER, _ARG),
the batch span processor's (OTEL_BSP_*) and the resource's
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


def service_name(default: str, env: Mapping[str, str] = os.environ) -> str:
    """The service name the spans will carry (what resource() resolves), read
    without the SDK: OTEL_SERVICE_NAME, else service.name in
    OTEL_RESOURCE_ATTRIBUTES, else ``default``."""
    name = env.get("OTEL_SERVICE_NAME", "").strip()
    if name:
        return name
    for item in env.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, _, value = item.partition("=")
        if key.strip() == "service.name" and value.strip():
            return value.strip()
    return default


def resource(service: str):
    """The SDK Resource of the spans: OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME,
    with ``service`` (the profile's) and this version where they set none."""
    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, OTELResourceDetector, Resource

    from_env = OTELResourceDetector().detect().attributes
    attrs = {}
    if not from_env.get(SERVICE_NAME):
        attrs[SERVICE_NAME] = service
    if not from_env.get(SERVICE_VERSION):
        attrs[SERVICE_VERSION] = __version__
    return Resource.create(attrs)


def sampler():
    """The sampler OTEL_TRACES_SAMPLER (and _ARG) name, as the SDK reads them
    (default: parent-based, always on)."""
    from opentelemetry.sdk.trace import TracerProvider
    return TracerProvider(shutdown_on_exit=False).sampler
