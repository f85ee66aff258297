"""One Worker's own dashboard (dashboardListen / DASHBOARD_LISTEN, empty = off):
the same pages as `blockx dashboard`, showing that Worker alone, served in its
event loop beside its gRPC server.

It dials the Worker's own gRPC address with the token a person logs in with, so
the ownership rules are the gRPC port's own; it knows the Worker's tokens file,
so it shows the identity's name. It serves https with the Worker's certificate
(WORKER_TLS_CERT / WORKER_TLS_KEY) when the port has one, and then reaches the
port over TLS with BLOCKX_TLS_CA (else the Worker's certificate as the CA, which
fits a self-signed one). With WORKER_AUTH_MODE=mtls a browser's token is no
identity: the pages do not start and the log says why."""
from __future__ import annotations

import logging
import time

from blockx.dashboard.app import Dashboard, DashboardConfig
from blockx.dashboard.clients import ClientPool
from blockx.dashboard.fleet import FleetSource
from blockx.dashboard.guard import allowed_host_names
from blockx.dashboard.server import Running, server_ssl, split_listen, start
from blockx.log_event import log_event
from blockx.tls.client_tls import ClientTLS

log = logging.getLogger("blockx.dashboard")


async def start_own_dashboard(cfg, worker_addr: str, auth) -> Running | None:
    """Start the pages on cfg.dashboard_listen; None when they cannot be served (logged)."""
    if auth.mode == "mtls":
        log_event(log, "dashboard_not_started", listen=cfg.dashboard_listen,
                  message="WORKER_AUTH_MODE is mtls: a browser logs in with a token, so run `blockx dashboard` "
                          "with a client certificate instead, or unset DASHBOARD_LISTEN")
        return None
    tls = cfg.tls_cert and cfg.tls_key
    ssl_ctx = server_ssl(cfg.tls_cert, cfg.tls_key) if tls else None
    client_tls = (ClientTLS.from_env() or ClientTLS(ca=cfg.tls_cert)) if tls else None
    tokens = auth.tokens

    def name_of(token: str) -> str | None:
        caller = tokens.identify(token) if tokens is not None else None
        return caller.name if caller is not None else None

    host, _port = split_listen(cfg.dashboard_listen)
    dash = Dashboard(FleetSource(addrs=[worker_addr]), ClientPool(client_tls, clock=time.monotonic),
                     DashboardConfig(tls=ssl_ctx is not None, allowed_hosts=allowed_host_names(host),
                                     name_of=name_of if tokens is not None else None))
    running = await start(dash.app(), cfg.dashboard_listen, ssl_ctx)
    log_event(log, "dashboard_listening", addr=cfg.dashboard_listen, port=running.port,
              scheme="https" if ssl_ctx is not None else "http")
    return running
