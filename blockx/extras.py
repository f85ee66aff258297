"""The optional parts of the `blockx-worker` distribution, and the message a
command prints when the one it needs is not installed.

The base install is a client: `blockx.client` and the client and fleet commands
need grpcio, protobuf, aetcd and redis (both pure Python) only. `blockx serve` needs the `worker` extra
(the event loop, the executors' greenlets, the data plane, metrics, OpenTelemetry
span export); the tables
and progress bars of `blockx status | top | submit` need the `cli` extra (rich),
which `worker` includes. pyproject.toml lists the same distributions (a unit
test compares them)."""

from __future__ import annotations

import importlib.util

DISTRIBUTION = "blockx-worker"

# import name -> distribution, for each extra.
EXTRAS: dict[str, dict[str, str]] = {
    "worker": {
        "uvloop": "uvloop",
        "greenlet": "greenlet",
        "orjson": "orjson",
        "duckdb": "duckdb",
        "asyncpg": "asyncpg",
        "pglast": "pglast",
        "aiohttp": "aiohttp",
        "prometheus_client": "prometheus-client",
        "rich": "rich",
        "grpc_health": "grpcio-health-checking",
        "grpc_reflection": "grpcio-reflection",
        "opentelemetry": "opentelemetry-api",
        "opentelemetry.sdk": "opentelemetry-sdk",
        "opentelemetry.exporter.otlp.proto.grpc": "opentelemetry-exporter-otlp-proto-grpc",
    },
    "cli": {"rich": "rich"},
}


class MissingExtra(Exception):
    """A command needs an extra that is not (fully) installed; str() says which
    packages are missing and how to install them."""


def _importable(mod: str) -> bool:
    """``find_spec`` of a dotted name imports its parents, and raises when one is
    missing (``opentelemetry.sdk`` without ``opentelemetry``): that is missing too."""
    try:
        return importlib.util.find_spec(mod) is not None
    except ModuleNotFoundError:
        return False


def missing(extra: str) -> list[str]:
    """The distributions of ``extra`` whose module cannot be imported here."""
    return [dist for mod, dist in EXTRAS[extra].items() if not _importable(mod)]


def require(extra: str, what: str) -> None:
    """Raise MissingExtra unless every module of ``extra`` is importable."""
    gone = missing(extra)
    if gone:
        raise MissingExtra(
            f"{what} needs the {extra!r} extra of {DISTRIBUTION}, and {', '.join(gone)} "
            f"{'is' if len(gone) == 1 else 'are'} not installed: pip install '{DISTRIBUTION}[{extra}]'")


def has(extra: str) -> bool:
    return not missing(extra)
