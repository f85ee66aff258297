"""ClientTLS: how a client reaches a Worker (or a Worker its shadow target) over
TLS: the CA that signed the server's certificate and, for mutual TLS, the
client's own certificate and key.

From code: `WorkerClient(addr, tls=ClientTLS(ca="ca.pem", cert="c.pem", key="c.key"))`.
From the environment (what WorkerClient reads when `tls` is not given, and what
the CLI's --tls-ca / --tls-cert / --tls-key default to): BLOCKX_TLS_CA,
BLOCKX_TLS_CERT, BLOCKX_TLS_KEY. Without any of them the channel is plaintext.
An empty `ca` uses the system's root certificates."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc

ENV_CA, ENV_CERT, ENV_KEY = "BLOCKX_TLS_CA", "BLOCKX_TLS_CERT", "BLOCKX_TLS_KEY"


class TLSFileError(ValueError):
    """A TLS file named to the client cannot be read."""


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise TLSFileError(f"cannot read the TLS {what} {path!r}: {exc.strerror or exc}") from None


@dataclass(frozen=True, slots=True)
class ClientTLS:
    ca: str = ""
    cert: str = ""
    key: str = ""

    def __post_init__(self) -> None:
        if bool(self.cert) != bool(self.key):
            raise ValueError("a TLS client certificate needs its key and a key its certificate "
                             "(--tls-cert and --tls-key go together)")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClientTLS | None:
        env = os.environ if env is None else env
        ca, cert, key = env.get(ENV_CA, ""), env.get(ENV_CERT, ""), env.get(ENV_KEY, "")
        return cls(ca, cert, key) if (ca or cert or key) else None

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca, "CA") if self.ca else None,
            private_key=_read(self.key, "key") if self.key else None,
            certificate_chain=_read(self.cert, "certificate") if self.cert else None)


def aio_channel(addr: str, tls: ClientTLS | None, options: list[tuple[str, Any]] | None = None) -> grpc.aio.Channel:
    """A grpc.aio channel to `addr`: TLS when `tls` is given, plaintext otherwise."""
    if tls is None:
        return grpc.aio.insecure_channel(addr, options=options)
    return grpc.aio.secure_channel(addr, tls.credentials(), options=options)


TLS_FROM_ENV: Any = object()   # WorkerClient(tls=...) default: read BLOCKX_TLS_* from the environment
