"""etcd over TLS: aetcd (the asyncio etcd client the Worker uses) only opens plaintext
channels, so `etcd_client()` returns a subclass whose connect() opens a
grpc.aio secure channel with the CA and optional client certificate
(ETCD_CA_CERT, ETCD_CERT, ETCD_KEY) and sets up the same stubs. Without TLS it
is the plain aetcd.Client. Shared by the Worker's publisher and anything else
that talks to etcd."""

from __future__ import annotations

import asyncio
from typing import Any

import aetcd
from aetcd import rpc, watcher
from aetcd.client import _handle_errors

from blockx.tls.client_tls import ClientTLS


class TLSClient(aetcd.Client):
    def __init__(self, *args: Any, tls: ClientTLS, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tls = tls

    @_handle_errors
    async def connect(self) -> None:
        if self._connected.is_set():
            return
        if self._is_connecting:     # type: ignore[has-type]  # aetcd.Client sets it in an untyped __init__
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        try:
            self._is_connecting = True
            import grpc

            self.channel = grpc.aio.secure_channel(f"{self._host}:{self._port}", self._tls.credentials(),
                                                   options=list(self._options.items()))
            self.kvstub = rpc.KVStub(self.channel)
            self.clusterstub = rpc.ClusterStub(self.channel)
            self.leasestub = rpc.LeaseStub(self.channel)
            self.maintenancestub = rpc.MaintenanceStub(self.channel)
            self._watcher = watcher.Watcher(rpc.WatchStub(self.channel), timeout=self._timeout,
                                            metadata=self.metadata)
            self._connected.set()
        finally:
            self._is_connecting = False


def etcd_client(host: str, port: int, *, tls: ClientTLS | None = None, **kwargs: Any) -> aetcd.Client:
    if tls is None:
        return aetcd.Client(host, port, **kwargs)
    return TLSClient(host, port, tls=tls, **kwargs)
