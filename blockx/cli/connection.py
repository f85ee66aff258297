"""How a client command reaches a worker: the --tls-* / --token options, the
ClientTLS and token they name, and `client_command`, which runs a command body
over one session (blockx.client) and turns a refusal into `error: CODE: message`,
exit 1. An address where nothing listens, or nothing answers within
--connect-timeout (1 s), ends the command at once with `error: UNAVAILABLE:
nothing listens at ADDR (connection refused)` or `... no answer from ADDR`
(blockx.client.reach). A TLS file that cannot be read is a usage error (exit 2).
The client library (and grpc) is imported on first use, so `blockx serve` and
`--help` do not pay for it."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from blockx.cli.arg_types import positive_seconds
from blockx.cli.exit import EXIT_ERROR, UsageError


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """--tls-ca / --tls-cert / --tls-key, defaulting to $BLOCKX_TLS_CA / _CERT / _KEY."""
    import os

    for flag, env, what in (("--tls-ca", "BLOCKX_TLS_CA", "CA certificate (PEM) that signed the worker's "
                                                          "certificate; turns TLS on"),
                            ("--tls-cert", "BLOCKX_TLS_CERT", "client certificate (PEM) for mutual TLS"),
                            ("--tls-key", "BLOCKX_TLS_KEY", "key (PEM) of --tls-cert")):
        parser.add_argument(flag, default=os.environ.get(env, ""), metavar="FILE",
                            help=f"{what} (default: ${env})")
    parser.add_argument("--token", default=None, metavar="TOKEN",
                        help="bearer token for a worker with WORKER_AUTH_MODE=token (default: $BLOCKX_TOKEN, "
                             "else the token the worker generated on this host, <STATE_DIR>/auth-token)")


# blockx.client.reach.DEFAULT_CONNECT_TIMEOUT_S (a unit test keeps them equal), spelt out here
# because importing blockx.client imports grpc, which `--help` should not wait for.
DEFAULT_CONNECT_TIMEOUT_S = 1.0


def add_connect_timeout_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--connect-timeout", type=positive_seconds, default=DEFAULT_CONNECT_TIMEOUT_S,
                        metavar="SECONDS", help="how long the address may take to answer before the command "
                        "fails with 'no answer from ADDR'; a refused connection fails at once "
                        "(default: %(default)s)")


def connect_timeout(ns: argparse.Namespace) -> float:
    """--connect-timeout, for the commands that have it (a namespace built by hand may not)."""
    return getattr(ns, "connect_timeout", None) or DEFAULT_CONNECT_TIMEOUT_S


def token_from_args(ns: argparse.Namespace):
    """--token when given, else the client's default resolution (blockx.credentials)."""
    from blockx.credentials import TOKEN_FROM_ENV

    token = getattr(ns, "token", None)
    return TOKEN_FROM_ENV if token is None else token


def tls_from_args(ns: argparse.Namespace):
    """A ClientTLS when any --tls-* option (or its env var) is set, else None (plaintext)."""
    from blockx.client import ClientTLS

    ca, cert, key = getattr(ns, "tls_ca", ""), getattr(ns, "tls_cert", ""), getattr(ns, "tls_key", "")
    if not (ca or cert or key):
        return None
    try:
        return ClientTLS(ca, cert, key)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def client_command(fn):
    """Run a client command body over one session (blockx.client); a refusal or a
    broken session becomes `error: CODE: message`, exit 1."""
    def wrapper(ns: argparse.Namespace, out: TextIO | None = None) -> int:
        from blockx.client import BlockxError, connect
        from blockx.tls.client_tls import TLSFileError

        out = out or sys.stdout
        try:
            with connect(ns.addr, connect_timeout_s=connect_timeout(ns), tls=tls_from_args(ns),
                         token=token_from_args(ns)) as client:
                return fn(ns, client, out)
        except BlockxError as exc:
            from blockx.cli.text import term_safe   # the worker's message, escaped for the terminal
            print(f"error: {exc.code.name}: {term_safe(exc.message, keep_newlines=True)}", file=sys.stderr)
            return EXIT_ERROR
        except TLSFileError as exc:
            raise UsageError(str(exc)) from None

    wrapper.__name__ = fn.__name__
    return wrapper
