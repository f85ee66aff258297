"""The bearer token a client sends to a Worker (WORKER_AUTH_MODE=token).

Where it comes from, first match wins:
1. given explicitly: ``WorkerClient(addr, token="...")``, the CLI's ``--token``;
2. the environment: ``BLOCKX_TOKEN``;
3. the Worker's own host: the token the Worker generated into
   ``<STATE_DIR>/auth-token`` (``admin <token>``, mode 0600) when it runs
   without a tokens file. STATE_DIR resolves as the Worker resolves it:
   ``$STATE_DIR``, else ``$XDG_STATE_HOME/blockx``, else ``~/.local/state/blockx``.
Without any, the client sends no credentials (a Worker with WORKER_AUTH_MODE=none,
or mtls, needs none). The token travels as the ``authorization: Bearer <token>``
metadata of every RPC and of the session stream."""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

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


def resolve_token(token: str | None | object = TOKEN_FROM_ENV, env: Mapping[str, str] | None = None) -> str | None:
    """The token to send: ``token`` when given (None or "": send none), else
    $BLOCKX_TOKEN, else the local token file."""
    if token is not TOKEN_FROM_ENV:
        return token or None
    env = os.environ if env is None else env
    return env.get(ENV_TOKEN, "") or local_token(env)


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...] | None:
    """The call metadata that carries ``token`` (None: no credentials)."""
    if not token:
        return None
    return (("authorization", f"Bearer {token}"),)


__all__ = ["ENV_TOKEN", "TOKEN_FROM_ENV", "auth_metadata", "local_token", "resolve_token", "state_dir"]
