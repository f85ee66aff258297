"""What a tenant may read of a failure: the message without the server's paths and
without the detail marked for the server's eyes only.

A failure message is written once, whole, for the Worker's log, its stored result
and the admin identity. A message that names what only the server should know
(the functions directory, the ids of every function) puts that part in
``server_only(...)``: `` [server only: ...]``. What a non-admin identity is
given (blockx.adapters.grpc.result_pages, on delivery; and a subcall's error, which
the tenant's own code reads) goes through ``tenant_message``, which

- drops each `` [server only: ...]`` part, saying that the Worker's admin sees it;
- replaces every absolute path (``/srv/blockx/functions``, a DuckDB file, a
  socket, a traceback's file) and the path of a ``duckdb://``, ``file://``,
  ``sqlite://`` or ``unix://`` URL with ``<server path>``; a URL's own path
  (``https://host/v1/x``) is not a file and stays.

Pure string work, no IO: plugins mark, adapters deliver."""
from __future__ import annotations

import re
from typing import Any

SERVER_ONLY = " [server only: "
SERVER_PATH = "<server path>"
HIDDEN = " [more detail: the worker's admin identity and its log]"
_SERVER_ONLY = re.compile(r" ?\[server only: .*?\](?=$|[\s.;,)\]}\"'])", re.DOTALL)
_FILE_URL = re.compile(r"\b(duckdb|file|sqlite|unix):///*[^\s'\"`)\]]*", re.IGNORECASE)
# An absolute path of two parts or more, not inside a word, a URL or another path.
_ABS_PATH = re.compile(r"(?<![\w/.:~@%+-])/[\w.@+~-]+(?:/[\w.@+~-]*)+")


def server_only(detail: str) -> str:
    """``detail`` marked as the server's: the admin and the log read it, tenants do not."""
    return f"{SERVER_ONLY}{detail}]"


def tenant_message(text: str) -> str:
    """``text`` as a non-admin identity may read it (module docstring)."""
    if not text:
        return text
    if SERVER_ONLY in text or text.startswith(SERVER_ONLY[1:]):
        text = _SERVER_ONLY.sub(HIDDEN, text)
    if "/" in text:
        text = _FILE_URL.sub(lambda m: f"{m.group(1)}://{SERVER_PATH}", text)
        text = _ABS_PATH.sub(SERVER_PATH, text)
    return text


def tenant_strings(value: Any) -> Any:
    """``value`` (a JSON document: a trace) with each string through tenant_message."""
    if isinstance(value, str):
        return tenant_message(value)
    if isinstance(value, list):
        return [tenant_strings(v) for v in value]
    if isinstance(value, dict):
        return {k: tenant_strings(v) for k, v in value.items()}
    return value


__all__ = ["SERVER_PATH", "server_only", "tenant_message", "tenant_strings"]
