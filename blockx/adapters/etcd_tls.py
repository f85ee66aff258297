"""etcd over TLS, for callers that hold a ClientTLS and one endpoint: a thin door
onto blockx.etcd.connection.EtcdConnection, the one factory of etcd clients."""

from __future__ import annotations

from typing import Any

from blockx.etcd.connection import EtcdConnection
from blockx.tls.client_tls import ClientTLS


def etcd_client(host: str, port: int, *, tls: ClientTLS | None = None, **kwargs: Any) -> Any:
    return EtcdConnection(((host, port),), tls).client(**kwargs)
