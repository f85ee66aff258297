"""Secrets out of what the Worker prints and logs: one set of rules for URLs, their
query strings, header values and free text, used by `blockx serve --print-config`
(blockx.app.config_fields), the JSON log lines (blockx.app.logs) and the error
messages that name a data source, an RPC backend or a Redis server.

A secret shows as ``***``; what is left still says which server and which
setting. The rules:

- userinfo: a password (``scheme://user:pw@host``, ``redis://:pw@host``) is
  hidden, the user name kept; a lone user name of an http(s) or ws(s) URL is
  hidden too (there it is usually a token), of a database URL kept (a role).
- query parameters whose name holds password, passwd, pwd, secret, token, key,
  auth, credential or signature (any case: ``sslpassword``, ``apikey``,
  ``api_key``, ``X-Api-Key``, ``access_token``) have their value hidden.
- an http(s) / ws(s) path segment that looks like a key (16 or more letters,
  digits, ``-`` or ``_``, with both letters and digits: ``/v3/<key>``) is hidden.
- header values are hidden whatever the header; a value given as
  ``{"env": VAR}`` names a variable, not a secret, and stays.
- in free text, every URL is redacted as above, and so is the credential after
  ``Bearer``.

Pure string work, no IO: every layer may use it."""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

MASK = "***"
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|key|auth|credential|signature", re.IGNORECASE)
_WEB_SCHEMES = frozenset({"http", "https", "ws", "wss"})
_KEYLIKE = re.compile(r"[A-Za-z0-9_-]{16,}")
_HAS_LETTER = re.compile(r"[A-Za-z]")
_HAS_DIGIT = re.compile(r"[0-9]")
# A URL in text ends at white space, a quote, a backslash (a JSON escape) or an angle bracket.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s'\"<>\\`]+")
_BEARER = re.compile(r"\b(Bearer)(\s+)[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)
_URL_SPLIT = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$", re.DOTALL)


def secret_name(name: str) -> bool:
    """True when a query parameter, header or setting called ``name`` holds a secret."""
    return bool(_SECRET_NAME.search(unquote(name)))


def _keylike(segment: str) -> bool:
    return (_KEYLIKE.fullmatch(segment) is not None and _HAS_LETTER.search(segment) is not None
            and _HAS_DIGIT.search(segment) is not None)


def _redact_query(query: str) -> str:
    parts = []
    for pair in query.split("&"):
        name, eq, value = pair.partition("=")
        parts.append(f"{name}={MASK}" if eq and value and secret_name(name) else pair)
    return "&".join(parts)


def redact_url(url: str) -> str:
    """``url`` with its secrets as ``***`` (the rules of this module); text that is
    not a ``scheme://`` URL comes back unchanged."""
    m = _URL_SPLIT.match(url)
    if m is None:
        return url
    scheme, netloc, path, query, fragment = m.groups()
    web = scheme.lower() in _WEB_SCHEMES
    userinfo, at, host = netloc.rpartition("@")
    if at:
        user, colon, _pw = userinfo.partition(":")
        if colon:
            netloc = f"{user}:{MASK}@{host}"
        elif web and user:
            netloc = f"{MASK}@{host}"
    if web and path:
        path = "/".join(MASK if _keylike(unquote(s)) else s for s in path.split("/"))
    out = f"{scheme}://{netloc}{path}"
    if query:
        out += "?" + _redact_query(query[1:])
    if fragment:
        out += fragment if not secret_name(fragment) else "#" + MASK
    return out


def redact_headers(headers: Mapping[str, Any]) -> dict[str, Any]:
    """Header name -> ``***`` for a literal value; ``{"env": VAR}`` references stay."""
    return {name: MASK if isinstance(value, (str, bytes, int, float)) else value
            for name, value in headers.items()}


def redact_text(text: str) -> str:
    """Free text (a log line, an error message) with every URL in it redacted and
    the credential after Bearer hidden. Text without ``://`` or ``earer`` is
    returned as is, after one substring search each."""
    if "://" in text:
        text = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
    if "earer" in text:
        text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    return text


def redact_value(value: Any) -> Any:
    """A config value as it may be printed: strings through redact_text, lists and
    dicts element by element (a dict's ``headers`` through redact_headers)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return [redact_value(v) for v in value]
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if k == "headers" and isinstance(v, Mapping):
                out[k] = redact_headers(v)
            else:                       # keys are names (a data source's, an endpoint's), never hidden
                out[k] = redact_value(v)
        return out
    return value


__all__ = ["MASK", "redact_headers", "redact_text", "redact_url", "redact_value", "secret_name"]
