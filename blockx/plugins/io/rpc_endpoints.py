"""The named JSON-RPC endpoints of the rpc IO backend, read from the Worker config.

    "ioBackends": {"rpc": {"endpoints": {
        "main": {"urls": ["https://node-a:8545", "https://node-b:8545"],
                 "headers": {"Authorization": {"env": "NODE_TOKEN"}},
                 "timeoutMs": 3000, "concurrency": 8}}}}

An endpoint is a name the function code uses; its URLs, headers, timeout and
concurrency live only here, never in a task payload. `urls` are tried in order,
a transient failure moving to the next one. A header value is either a plain
string or {"env": "VAR"}: the value of that environment variable of the Worker,
so a secret never sits in the config file. `timeoutMs` and `concurrency` fall
back to ioBackends.rpc.timeoutMs / .concurrency.

`parse_endpoints` is the one place these objects are checked: the config's rule
(endpoint_problems) collects its problems, the backend gets its RpcEndpoint
values. RPC_RULES are the rules of the other ioBackends.rpc settings."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from blockx.core.config_rules import Rule
from blockx.json_types import json_type
from blockx.redaction import redact_url

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_HEADER = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")   # an HTTP token
_KEYS = ("urls", "headers", "timeoutMs", "concurrency")
_RESERVED_HEADERS = {"content-type", "content-length", "host", "transfer-encoding"}

RPC_RULES = (Rule("timeout_ms", 1), Rule("concurrency", 1), Rule("max_queue", 1),
             Rule("max_batch", 1, 10_000),
             Rule("max_response_bytes", 1, 15 * 1024 * 1024, note="a result travels in one 16 MiB frame"),
             Rule("retries", 0, 10), Rule("retry_backoff_ms", 0, 60_000))


@dataclass(frozen=True)
class RpcEndpoint:
    name: str
    urls: tuple[str, ...]
    headers: tuple[tuple[str, str], ...]
    timeout_ms: int
    concurrency: int


def parse_endpoints(raw: Mapping[str, object], *, timeout_ms: int, concurrency: int,
                    environ: Mapping[str, str], path: str = "ioBackends.rpc.endpoints"
                    ) -> tuple[dict[str, RpcEndpoint], list[str]]:
    """(endpoints that are valid, every problem found, each naming its JSON path)."""
    out: dict[str, RpcEndpoint] = {}
    problems: list[str] = []
    for name, spec in raw.items():
        here = f"{path}.{name}"
        if not _NAME.match(name):
            problems.append(f"{here}: an endpoint name is 1-64 letters, digits, '_', '.' or '-'")
            continue
        if not isinstance(spec, dict):
            problems.append(f"{here}: expected an object, got {json_type(spec)}")
            continue
        before = len(problems)
        extra = sorted(k for k in spec if k not in _KEYS)
        if extra:
            problems.append(f"{here}: unknown key(s) {', '.join(map(repr, extra))} (allowed: {', '.join(_KEYS)})")
        urls = _urls(spec.get("urls"), f"{here}.urls", problems)
        headers = _headers(spec.get("headers", {}), f"{here}.headers", environ, problems)
        t = _positive(spec.get("timeoutMs", timeout_ms), f"{here}.timeoutMs", problems)
        c = _positive(spec.get("concurrency", concurrency), f"{here}.concurrency", problems)
        if len(problems) == before:
            out[name] = RpcEndpoint(name, urls, headers, t, c)
    return out, problems


def _urls(value, here: str, problems: list[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        problems.append(f"{here}: expected a non-empty list of http:// or https:// URLs")
        return ()
    for u in value:
        if not isinstance(u, str):
            problems.append(f"{here}: expected URL strings, got {json_type(u)}")
            continue
        parts = urlsplit(u)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problems.append(f"{here}: {_redacted(u)!r} is not an http:// or https:// URL with a host")
    return tuple(u for u in value if isinstance(u, str))


def _headers(value, here: str, environ: Mapping[str, str], problems: list[str]) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        problems.append(f"{here}: expected an object of header name -> \"text\" or {{\"env\": \"VAR\"}}")
        return ()
    out = []
    for h, v in value.items():
        if not _HEADER.match(h) or h.lower() in _RESERVED_HEADERS:
            problems.append(f"{here}: {h!r} is not a header the backend may set")
            continue
        if isinstance(v, dict) and set(v) == {"env"} and isinstance(v["env"], str):
            text = environ.get(v["env"])
            if text is None:
                problems.append(f"{here}.{h}: environment variable {v['env']} is not set")
                continue
        elif isinstance(v, str):
            text = v
        else:
            problems.append(f"{here}.{h}: expected \"text\" or {{\"env\": \"VAR\"}}, got {json_type(v)}")
            continue
        if any(c in text for c in "\r\n\0"):
            problems.append(f"{here}.{h}: the value holds a line break or NUL")
            continue
        out.append((h, text))
    return tuple(out)


def _positive(value, here: str, problems: list[str]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        problems.append(f"{here} must be an integer > 0 (got {value!r})")
        return 0
    return value


def _redacted(url: str) -> str:
    """The URL without user:password@ and with its secrets hidden (blockx.redaction:
    an apikey in the query, a key in the path): an error message may be logged."""
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        url = parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]).geturl()
    return redact_url(url)


def url_label(url: str) -> str:
    """scheme://host:port of a URL, for error messages (the path may hold an API key)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"


def endpoint_problems(raw: Mapping[str, object], *, timeout_ms: int, concurrency: int,
                      environ: Mapping[str, str]) -> list[str]:
    """The rule of ioBackends.rpc.endpoints: every problem parse_endpoints finds."""
    return parse_endpoints(raw, timeout_ms=timeout_ms, concurrency=concurrency, environ=environ)[1]
