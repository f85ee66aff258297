"""Credentials of the test harness: every worker a test starts accepts the
harness's admin token (a tokens file in the worker's tmp dir), and every channel,
session, blockx.client and CLI the harness opens carries it (BLOCKX_TOKEN is set
for the test process and its subprocesses by the e2e conftest).

The auth tests name their own tokens (``write_tokens``) and channels (``channel``
with ``token=``) to act as other identities or as none."""
from __future__ import annotations

import os
import secrets

import grpc

from blockx.credentials import ENV_TOKEN

HARNESS_TOKEN = secrets.token_urlsafe(24)      # per test process; named admin on every harness worker


def metadata(token: str | None = HARNESS_TOKEN) -> tuple[tuple[str, str], ...] | None:
    return (("authorization", f"Bearer {token}"),) if token else None


def write_tokens(directory: str | os.PathLike, tokens: dict[str, str], name: str = "tokens") -> str:
    """A tokens file (`name token` a line) in ``directory``; returns its path."""
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write("# written by the test harness\n")
        for who, token in tokens.items():
            f.write(f"{who} {token}\n")
    os.chmod(path, 0o600)
    return path


class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
              grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds the bearer token to every call of a synchronous channel."""

    def __init__(self, token: str) -> None:
        self._md = (("authorization", f"Bearer {token}"),)

    def _details(self, d):
        md = tuple(d.metadata or ()) + self._md
        return d._replace(metadata=md) if hasattr(d, "_replace") else _Details(d, md)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        return continuation(self._details(details), request_iterator)


class _Details(grpc.ClientCallDetails):
    def __init__(self, d, md) -> None:
        self.method, self.timeout, self.credentials = d.method, d.timeout, d.credentials
        self.wait_for_ready, self.compression = d.wait_for_ready, d.compression
        self.metadata = md


def channel(addr: str, tls=None, token: str | None = HARNESS_TOKEN) -> grpc.Channel:
    """A synchronous channel to ``addr`` whose every call carries ``token`` (None: none)."""
    ch = grpc.insecure_channel(addr) if tls is None else grpc.secure_channel(addr, tls.credentials())
    return grpc.intercept_channel(ch, _Bearer(token)) if token else ch


def use_harness_token() -> None:
    """The test process (and the CLIs and workers it starts) find the harness token."""
    os.environ[ENV_TOKEN] = HARNESS_TOKEN
