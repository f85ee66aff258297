"""The bearer token a client sends to a Worker (WORKER_AUTH_MODE=token).

Below both the client library and the Worker: blockx.client sends it, and the
Worker uses the same rules (its shadow copies forward with it, its
authenticator asks whether an address is on this host, `blockx serve` resolves
the local token), so neither side imports the other for it.

Where it comes from, first match wins:
1. given explicitly: ``WorkerClient(addr, token="...")``, the CLI's ``--token``;
2. the environment: ``BLOCKX_TOKEN``;
3. the Worker's own host (only for an address on this host: loopback or unix):
   the token the Worker generated into
   ``<STATE_DIR>/auth-token`` (``admin <token>``, mode 0600) when it runs
   without a tokens file. STATE_DIR resolves as the Worker resolves it:
   ``$STATE_DIR``, else ``$XDG_STATE_HOME/blockx``, else ``~/.local/state/blockx``.
Without any, the client sends no credentials (a Worker with WORKER_AUTH_MODE=none,
or mtls, needs none). The token travels as the ``authorization: Bearer <token>``
metadata of every RPC and of the session stream."""
from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from typing import Any, cast

ENV_TOKEN = "BLOCKX_TOKEN"
LOCAL_TOKEN_FILE = "auth-token"
TOKEN_FROM_ENV: Any = object()   # WorkerClient(token=...) default: BLOCKX_TOKEN, else the local token file


def state_dir(env: Mapping[str, str] | None = None) -> str:
    """The Worker's default STATE_DIR (dataPlane.stateDir) on this host."""
    env = os.environ if env is None else env
    explicit = env.get("STATE_DIR", "")
    if explicit:
        return explicit
    base = env.get("XDG_STATE_HOME", "") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "blockx")


def local_token(env: Mapping[str, str] | None = None) -> str | None:
    """The token of ``<STATE_DIR>/auth-token``, None when there is none readable."""
    path = os.path.join(state_dir(env), LOCAL_TOKEN_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and not parts[0].startswith("#"):
                    return parts[1]
    except (OSError, UnicodeDecodeError):
        return None
    return None


def is_local_address(addr: str) -> bool:
    """True when ``addr`` (host:port, [v6]:port, unix:path) reaches only this host."""
    if addr.startswith("unix:"):
        return True
    host = addr.rsplit(":", 1)[0] if addr.count(":") == 1 or addr.startswith("[") else addr
    host = host.strip("[]").lower()
    if host in ("localhost", "ip6-localhost") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_token(token: str | None | object = TOKEN_FROM_ENV, env: Mapping[str, str] | None = None,
                  addr: str | None = None) -> str | None:
    """The token to send: ``token`` when given (None or "": send none), else
    $BLOCKX_TOKEN, else the local token file: that one is the local Worker's admin
    token, so it is sent only to an ``addr`` on this host (loopback or unix), never
    to another host (a typo, a fleet entry, a shadow target would receive it)."""
    if token is not TOKEN_FROM_ENV:
        return cast("str | None", token) or None
    env = os.environ if env is None else env
    explicit = env.get(ENV_TOKEN, "")
    if explicit:
        return explicit
    if addr is not None and not is_local_address(addr):
        return None
    return local_token(env)


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...] | None:
    """The call metadata that carries ``token`` (None: no credentials)."""
    if not token:
        return None
    return (("authorization", f"Bearer {token}"),)


__all__ = ["ENV_TOKEN", "TOKEN_FROM_ENV", "auth_metadata", "is_local_address", "local_token", "resolve_token",
           "state_dir"]
