"""`blockx dashboard`: the fleet in a browser (blockx.dashboard), served until Ctrl-C / SIGTERM.

It reads the fleet from etcd (--etcd: the workers registered under --etcd-prefix,
followed live) or from --workers ADDR,..., and each worker over its gRPC API with
the token a person logs in with: that identity's tasks only, every task for an
admin token. It listens on 127.0.0.1 by default; --listen 0.0.0.0:PORT exposes it
(then give it --tls-cert / --tls-key and --allowed-host). It prints the URL it
serves on stdout, one line. Needs the worker extra (aiohttp)."""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import TextIO

from blockx.cli.exit import EXIT_OK, CLIError


def add_parser(sub) -> None:
    from blockx.cli.completers import files
    from blockx.cli.fleet import add_etcd_security
    from blockx.cli.help import RAW, epilog
    from blockx.dashboard.server import DEFAULT_LISTEN
    from blockx.dashboard.sessions import DEFAULT_CAPACITY, DEFAULT_IDLE_S, DEFAULT_MAX_AGE_S

    d = sub.add_parser("dashboard", help="serve the fleet dashboard in a browser (workers, tasks, timelines)",
                       description=__doc__, epilog=epilog(
                           "blockx dashboard --workers 127.0.0.1:8081",
                           "blockx dashboard --etcd 127.0.0.1:2379 --listen 127.0.0.1:8088",
                           "blockx dashboard --etcd --listen 0.0.0.0:8443 --tls-cert dash.pem --tls-key dash.key "
                           "--allowed-host dash.example.internal"), **RAW)
    d.add_argument("--listen", default=os.environ.get("BLOCKX_DASHBOARD_LISTEN") or DEFAULT_LISTEN,
                   metavar="HOST:PORT", help="where the dashboard listens; port 0 picks a free one "
                   "(default: $BLOCKX_DASHBOARD_LISTEN or %(default)s, loopback only)")
    d.add_argument("--workers", action="append", default=None, metavar="ADDR[,ADDR...]",
                   help="worker gRPC addresses to show (repeatable, comma-separated); with --etcd, shown "
                        "beside the registered ones")
    d.add_argument("--etcd", nargs="?", default=None, const=os.environ.get("BLOCKX_ETCD") or "127.0.0.1:2379",
                   metavar="ENDPOINTS", help="follow the workers registered in etcd; ENDPOINTS defaults to "
                   "$BLOCKX_ETCD or 127.0.0.1:2379")
    d.add_argument("--etcd-prefix", default="/blockx/workers/", metavar="PREFIX",
                   help="worker registry prefix with --etcd (default: %(default)s)")
    add_etcd_security(d)
    g = d.add_argument_group("https (default: the worker's own WORKER_TLS_CERT / WORKER_TLS_KEY)")
    files(g.add_argument("--tls-cert", default=os.environ.get("WORKER_TLS_CERT", ""), metavar="PEM",
                         help="certificate the dashboard serves https with; also makes the cookie Secure"))
    files(g.add_argument("--tls-key", default=os.environ.get("WORKER_TLS_KEY", ""), metavar="PEM",
                         help="the key of --tls-cert (PEM)"))
    w = d.add_argument_group("reaching the workers' gRPC ports (default: $BLOCKX_TLS_CA / _CERT / _KEY)")
    files(w.add_argument("--worker-ca", default=os.environ.get("BLOCKX_TLS_CA", ""), metavar="PEM",
                         help="CA that signed the workers' certificates: gRPC over TLS"))
    files(w.add_argument("--worker-cert", default=os.environ.get("BLOCKX_TLS_CERT", ""), metavar="PEM",
                         help="client certificate, for workers whose port speaks mutual TLS"))
    files(w.add_argument("--worker-key", default=os.environ.get("BLOCKX_TLS_KEY", ""), metavar="PEM",
                         help="the key of --worker-cert (PEM)"))
    d.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a host name the browser may use to reach the dashboard (repeatable); bound to "
                        "loopback it answers 127.0.0.1, localhost and [::1] only, which keeps DNS-rebinding "
                        "pages out")
    d.add_argument("--max-sessions", type=int, default=DEFAULT_CAPACITY, metavar="N",
                   help="login sessions kept in memory; the least recently used goes first (default: %(default)s)")
    d.add_argument("--session-idle", type=float, default=DEFAULT_IDLE_S, metavar="SECONDS",
                   help="a session ends after this long without a request (default: %(default)s)")
    d.add_argument("--session-max-age", type=float, default=DEFAULT_MAX_AGE_S, metavar="SECONDS",
                   help="and this long after its login, at the latest (default: %(default)s)")
    d.set_defaults(func=cmd_dashboard)


def _addresses(values: list[str] | None) -> list[str]:
    out = []
    for v in values or ():
        out += [a.strip() for a in v.split(",") if a.strip()]
    return out


def cmd_dashboard(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    from blockx.extras import has

    if not has("worker"):
        raise CLIError("blockx dashboard needs aiohttp: pip install 'blockx-worker[worker]'")
    addrs = _addresses(ns.workers)
    if not addrs and not ns.etcd:
        raise CLIError("name the fleet: --workers ADDR[,ADDR...] and / or --etcd [ENDPOINTS]")
    if bool(ns.tls_cert) != bool(ns.tls_key):
        raise CLIError("--tls-cert and --tls-key go together (or set neither: plain http on loopback)")
    if ns.max_sessions < 1 or ns.session_idle <= 0 or ns.session_max_age <= 0:
        raise CLIError("--max-sessions, --session-idle and --session-max-age must be positive")
    try:
        return asyncio.run(_serve(ns, addrs, out))
    except KeyboardInterrupt:
        return EXIT_OK


async def _serve(ns: argparse.Namespace, addrs: list[str], out: TextIO) -> int:
    import time

    from blockx.adapters.tls import TLSFileError
    from blockx.client import ClientTLS
    from blockx.dashboard.app import Dashboard, DashboardConfig
    from blockx.dashboard.clients import ClientPool
    from blockx.dashboard.fleet import FleetSource
    from blockx.dashboard.guard import allowed_host_names, is_loopback_bind
    from blockx.dashboard.server import ListenError, server_ssl, split_listen, start

    try:
        host, _port = split_listen(ns.listen)
    except ListenError as exc:
        raise CLIError(f"--listen: {exc}") from None
    try:
        ssl_ctx = server_ssl(ns.tls_cert, ns.tls_key) if ns.tls_cert else None
        worker_tls = ClientTLS(ns.worker_ca, ns.worker_cert, ns.worker_key) \
            if (ns.worker_ca or ns.worker_cert or ns.worker_key) else None
    except (TLSFileError, ValueError) as exc:
        raise CLIError(str(exc)) from None
    if not is_loopback_bind(host) and ssl_ctx is None:
        print(f"warning: --listen {ns.listen} is not loopback and the dashboard has no --tls-cert: tokens and "
              "session cookies cross the network in clear text", file=sys.stderr)
    registry = None
    if ns.etcd:
        from blockx.cli.fleet import etcd_connection
        from blockx.client.registry import RegistryView

        registry = RegistryView(etcd_connection(ns), ns.etcd_prefix)
        if not await registry.start():
            print(f"warning: etcd {ns.etcd} does not answer yet ({registry.last_error or 'no answer'}); the fleet "
                  "fills in when it does", file=sys.stderr)
    source = FleetSource(addrs=addrs, registry=registry)
    pool = ClientPool(worker_tls, clock=time.monotonic)
    dash = Dashboard(source, pool, DashboardConfig(
        tls=ssl_ctx is not None, allowed_hosts=allowed_host_names(host, ns.allowed_host),
        session_capacity=ns.max_sessions, session_idle_s=ns.session_idle, session_max_age_s=ns.session_max_age))
    try:
        running = await start(dash.app(), ns.listen, ssl_ctx)
    except OSError as exc:
        raise CLIError(f"--listen {ns.listen}: {exc.strerror or exc}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    out.write(f"blockx dashboard: serving {'https' if ssl_ctx else 'http'}://{running.url_host}:{running.port}/\n")
    out.flush()
    try:
        await stop.wait()
    finally:
        await running.stop()
        if registry is not None:
            await registry.stop()
    return EXIT_OK
