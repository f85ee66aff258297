"""When the Worker exports spans, and under which service name: the profile's,
unless OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) says
another (the Worker's reading of it, for its log, agrees with the SDK's); and
the sampler is the one OTEL_TRACES_SAMPLER names."""
import pytest

from blockx import __version__
from blockx.adapters.telemetry import otel_export


@pytest.mark.parametrize("env, on", [
    ({}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_SDK_DISABLED": "true"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_SDK_DISABLED": "false"}, True),
])
def test_export_is_on_only_with_an_endpoint(env, on):
    assert otel_export.requested(env) is on


def _service(monkeypatch, **env):
    for k in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    attrs = dict(otel_export.resource("blockx-worker").attributes)
    import os
    assert otel_export.service_name("blockx-worker", os.environ) == attrs["service.name"]
    return attrs


def test_the_service_name_is_the_profiles_by_default(monkeypatch):
    attrs = _service(monkeypatch)
    assert attrs["service.name"] == "blockx-worker" and attrs["service.version"] == __version__


def test_otel_service_name_overrides_the_profile(monkeypatch):
    assert _service(monkeypatch, OTEL_SERVICE_NAME="billing-workers")["service.name"] == "billing-workers"
    attrs = _service(monkeypatch, OTEL_RESOURCE_ATTRIBUTES="service.name=from-attrs,deployment.environment=prod")
    assert attrs["service.name"] == "from-attrs" and attrs["deployment.environment"] == "prod"


def test_the_sampler_is_the_one_the_environment_names(monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    assert "TraceIdRatioBased{0.25}" in otel_export.sampler().get_description()
    monkeypatch.delenv("OTEL_TRACES_SAMPLER")
    assert otel_export.sampler().get_description().startswith("ParentBased{root:AlwaysOnSampler")
