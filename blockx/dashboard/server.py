"""Where the dashboard listens: the address (127.0.0.1 by default), TLS (the
Worker's own certificate and key settings, WORKER_TLS_CERT / WORKER_TLS_KEY, or
the --tls-cert / --tls-key of `blockx dashboard`), and the aiohttp runner that
serves a Dashboard's app there, in the caller's event loop (a Worker serving its
own pages runs it beside its gRPC server)."""
from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

DEFAULT_LISTEN = "127.0.0.1:8088"


class ListenError(ValueError):
    """A listen address that is not host:port."""


def split_listen(listen: str) -> tuple[str, int]:
    """'127.0.0.1:8088' -> ('127.0.0.1', 8088); '[::1]:0' -> ('::1', 0)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not host or int(port) > 65535:
        raise ListenError(f"a listen address is host:port, e.g. {DEFAULT_LISTEN} (got {listen!r})")
    return host.strip("[]"), int(port)


def server_ssl(cert: str, key: str) -> ssl.SSLContext:
    """The https context of the dashboard: TLS 1.2 at least, the given certificate."""
    from blockx.adapters.tls import TLSFileError, read_pem

    read_pem(cert, "TLS certificate")          # a clear error for a missing or non-PEM file
    read_pem(key, "TLS key")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        raise TLSFileError(f"the TLS certificate {cert!r} and key {key!r} do not load: {exc.reason or exc}") from None
    return ctx


@dataclass
class Running:
    runner: Any                    # aiohttp.web.AppRunner (aiohttp is imported when serving)
    host: str
    port: int

    @property
    def url_host(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start(app, listen: str, ssl_context: ssl.SSLContext | None) -> Running:
    """Serve the aiohttp ``app`` on ``listen``; the port it bound (port 0 picks one)."""
    from aiohttp import web

    host, port = split_listen(listen)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context, reuse_address=True)
    await site.start()
    server: Any = site._server
    bound = port
    if server is not None and getattr(server, "sockets", None):
        bound = server.sockets[0].getsockname()[1]
    return Running(runner, host, bound)
