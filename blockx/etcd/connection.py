"""EtcdConnection: how every etcd client of the Worker and of the client library
reaches etcd: the endpoints, TLS (the CA, a client certificate and key, the name
the server's certificate must carry) and an etcd user (name and password,
exchanged for an auth token that every request then carries).

It is the one factory for etcd channels and clients: the Worker builds one from
its config (`from_config`) and hands it to its registration, its function-code
watch and its audit allowlist; `blockx.client.Cluster`, `RegistryView`,
`blockx workers` and `blockx functions push|list` build one from the same
environment variables (`from_env`) or the CLI's flags. No client opens a channel
any other way, so a setting given once applies to every one of them.

The settings (worker config key / environment variable / CLI flag):
  etcdCaCert     ETCD_CA_CERT        --etcd-ca           set: TLS towards etcd
  etcdCert       ETCD_CERT           --etcd-cert         client certificate (with etcdKey)
  etcdKey        ETCD_KEY            --etcd-key
  etcdServerName ETCD_SERVER_NAME    --etcd-server-name  name the server certificate is checked for
  etcdUser       ETCD_USER           --etcd-user         etcd user (etcd auth enabled)
  etcdPassword   ETCD_PASSWORD                           its password, or
  etcdPasswordFile ETCD_PASSWORD_FILE --etcd-password-file  a file holding it

It imports nothing of the Worker: the client library uses it as the Worker does."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from blockx.etcd.endpoints import etcd_target, parse_endpoints
from blockx.tls.client_tls import ClientTLS

__all__ = ["EtcdAuthError", "EtcdConnection", "describe_etcd_error"]

ENV_CA, ENV_CERT, ENV_KEY = "ETCD_CA_CERT", "ETCD_CERT", "ETCD_KEY"
ENV_SERVER_NAME, ENV_USER, ENV_PASSWORD, ENV_PASSWORD_FILE = (
    "ETCD_SERVER_NAME", "ETCD_USER", "ETCD_PASSWORD", "ETCD_PASSWORD_FILE")


CLIENT_CHANNEL_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1000,
    "grpc.enable_http_proxy": 0,
}


class EtcdAuthError(RuntimeError):
    """etcd refused the user name / password (or auth is needed and none was given)."""


def _read_password(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError as exc:
        raise ValueError(f"{ENV_PASSWORD_FILE} {path!r} cannot be read: {exc.strerror or exc}") from None


@dataclass(frozen=True, slots=True)
class EtcdConnection:
    endpoints: tuple[tuple[str, int], ...]
    tls: ClientTLS | None = None
    server_name: str = ""
    user: str = ""
    password: str = ""

    def __post_init__(self) -> None:
        if bool(self.user) != bool(self.password):
            raise ValueError(f"an etcd user needs its password and a password its user "
                             f"({ENV_USER} with {ENV_PASSWORD} or {ENV_PASSWORD_FILE})")
        if self.server_name and self.tls is None:
            raise ValueError(f"{ENV_SERVER_NAME} is a TLS setting: set {ENV_CA} too")

    # ---- construction ----------------------------------------------------------------
    @classmethod
    def create(cls, endpoints: str | Iterable[str] | None, *, ca: str = "", cert: str = "", key: str = "",
               server_name: str = "", user: str = "", password: str = "",
               password_file: str = "") -> EtcdConnection:
        if password and password_file:
            raise ValueError(f"{ENV_PASSWORD} and {ENV_PASSWORD_FILE} are two ways to say one thing: set one")
        if password_file:
            password = _read_password(password_file)
        tls = ClientTLS(ca, cert, key) if (ca or cert or key) else None
        return cls(tuple(parse_endpoints(endpoints)), tls, server_name, user, password)

    @classmethod
    def from_env(cls, endpoints: str | Iterable[str] | None,
                 env: Mapping[str, str] | None = None) -> EtcdConnection:
        env = os.environ if env is None else env
        return cls.create(endpoints, ca=env.get(ENV_CA, ""), cert=env.get(ENV_CERT, ""),
                          key=env.get(ENV_KEY, ""), server_name=env.get(ENV_SERVER_NAME, ""),
                          user=env.get(ENV_USER, ""), password=env.get(ENV_PASSWORD, ""),
                          password_file=env.get(ENV_PASSWORD_FILE, ""))

    @classmethod
    def from_config(cls, cfg: Any) -> EtcdConnection:
        """From a WorkerFullConfig (duck-typed: this module does not import the Worker)."""
        return cls.create(cfg.etcd_endpoints if cfg.etcd_enabled else None, ca=cfg.etcd_ca_cert,
                          cert=cfg.etcd_cert, key=cfg.etcd_key, server_name=cfg.etcd_server_name,
                          user=cfg.etcd_user, password=cfg.etcd_password, password_file=cfg.etcd_password_file)

    @classmethod
    def of(cls, value: EtcdConnection | str | Iterable[str] | None) -> EtcdConnection:
        """A connection as given, or endpoints completed from the environment (as
        WorkerClient takes BLOCKX_TLS_* from it)."""
        return value if isinstance(value, EtcdConnection) else cls.from_env(value)

    # ---- what it tells -----------------------------------------------------------------
    @property
    def targets(self) -> list[str]:
        return [etcd_target(e) for e in self.endpoints]

    def describe(self) -> str:
        """"tls+auth(user)", "tls", "plaintext": for logs and status tables."""
        parts = ["mtls" if self.tls and self.tls.cert else "tls"] if self.tls else ["plaintext"]
        if self.user:
            parts.append(f"user={self.user}")
        return ",".join(parts)

    # ---- channels ------------------------------------------------------------------------
    def channel(self, endpoint: tuple[str, int], options: Iterable[tuple[str, Any]] = ()) -> grpc.aio.Channel:
        opts = list(options)
        target = etcd_target(endpoint)
        if self.tls is None:
            return grpc.aio.insecure_channel(target, options=opts)
        if self.server_name:
            opts.append(("grpc.ssl_target_name_override", self.server_name))
        return grpc.aio.secure_channel(target, self.tls.credentials(), options=opts)

    async def metadata(self, channel: grpc.aio.Channel, timeout: float) -> tuple[tuple[str, str], ...] | None:
        """The auth token's call metadata (None without a user): one Authenticate call."""
        if not self.user:
            return None
        from aetcd import rpc

        try:
            resp = await rpc.AuthStub(channel).Authenticate(
                rpc.AuthenticateRequest(name=self.user, password=self.password), timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT or "authentication failed" in (exc.details() or ""):
                raise EtcdAuthError(f"etcd refused user {self.user!r}: {exc.details()} "
                                    f"(check {ENV_USER} and {ENV_PASSWORD} / {ENV_PASSWORD_FILE})") from None
            raise
        return (("token", resp.token),)

    def client(self, index: int = 0, **kwargs: Any) -> Any:
        """An aetcd.Client for endpoint ``index`` whose connect() opens this
        connection's channel and authenticates as its user. Its reconnect backoff
        is capped at a second unless ``options`` says otherwise: gRPC's own grows
        to minutes, and a client that keeps its channel across an etcd outage
        would refuse calls that long after etcd is back."""
        host, port = self.endpoints[index]
        kwargs["options"] = {**CLIENT_CHANNEL_OPTIONS, **(kwargs.get("options") or {})}
        return _client_class()(host, port, connection=self, endpoint=(host, port), **kwargs)


@functools.cache
def _client_class() -> type:
    """The aetcd.Client subclass, made on first use (aetcd is imported only then)."""
    import aetcd
    from aetcd import rpc, watcher
    from aetcd.client import _handle_errors

    class Client(aetcd.Client):
        def __init__(self, *args: Any, connection: EtcdConnection, endpoint: tuple[str, int],
                     **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._connection = connection
            self._endpoint = endpoint

        @_handle_errors          # gRPC errors become aetcd's, as from every other aetcd call
        async def connect(self) -> None:
            if self._connected.is_set():
                return
            if self._is_connecting:     # type: ignore[has-type]  # aetcd.Client sets it in an untyped __init__
                await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
                return
            try:
                self._is_connecting = True
                self.channel = self._connection.channel(self._endpoint, self._options.items())
                try:
                    self.metadata = await self._connection.metadata(self.channel, self._timeout or 5.0)
                except BaseException:
                    await self.channel.close()
                    self.channel = None
                    raise
                self.kvstub = rpc.KVStub(self.channel)
                self.clusterstub = rpc.ClusterStub(self.channel)
                self.leasestub = rpc.LeaseStub(self.channel)
                self.maintenancestub = rpc.MaintenanceStub(self.channel)
                self._watcher = watcher.Watcher(rpc.WatchStub(self.channel), timeout=self._timeout,
                                                metadata=self.metadata)
                self._connected.set()
            finally:
                self._is_connecting = False

    return Client




def describe_etcd_error(exc: BaseException, connection: EtcdConnection) -> str:
    """One line a person can act on, naming the setting that fixes it."""
    if isinstance(exc, EtcdAuthError):
        return str(exc)
    cause = exc
    while cause.__cause__ is not None and not isinstance(cause, grpc.aio.AioRpcError):
        cause = cause.__cause__
    if isinstance(cause, grpc.aio.AioRpcError):
        code, details = cause.code(), cause.details() or ""
        text = f"{code.name}: {details}"
        if cause is not exc:            # aetcd's own error class says which call failed
            text = f"{type(exc).__name__}: {text}"
        if "user name is empty" in details or "invalid auth token" in details:
            return (f"{text} (etcd has authentication on: set {ENV_USER} and {ENV_PASSWORD} or "
                    f"{ENV_PASSWORD_FILE})")
        if code == grpc.StatusCode.PERMISSION_DENIED and not connection.user:
            return (f"{text} (etcd has authentication on and no etcd user was given: set {ENV_USER} and "
                    f"{ENV_PASSWORD} or {ENV_PASSWORD_FILE})")
        if code == grpc.StatusCode.PERMISSION_DENIED:
            return f"{text} (etcd user {connection.user!r} lacks the role for this key prefix)"
        if code == grpc.StatusCode.UNAVAILABLE and "Connection refused" not in details:
            if connection.tls is None:
                return (f"{text} (if this etcd serves TLS only, set {ENV_CA} and, for client certificates, "
                        f"{ENV_CERT} / {ENV_KEY})")
            return f"{text} (check {ENV_CA}, {ENV_CERT}, {ENV_KEY} and {ENV_SERVER_NAME} against etcd's certificate)"
        return text
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"
