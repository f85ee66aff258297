"""The dashboard's request checks: which Host it answers, which Origin may POST,
and the CSRF token of a session's POST. Pure functions over header values, so the
rules are tested without a server.

- Host: a browser sends the name it resolved. Bound to loopback, the dashboard
  answers only its own loopback names (127.0.0.1, localhost, [::1]) and the names
  given with --allowed-host: a DNS-rebinding page (a name of the attacker's that
  resolves to 127.0.0.1) gets 421, never the pages or the login.
- Origin: every POST must carry an Origin equal to the dashboard's own
  (scheme://host:port); a cross-site form or fetch has another one, and a POST
  without one is refused too (every browser this serves sends it on POST).
- CSRF: a session's POST carries its CSRF token in X-CSRF-Token (the page reads
  it from /api/me, same origin only); compared in constant time."""
from __future__ import annotations

import ipaddress
from collections.abc import Iterable

CSRF_HEADER = "X-CSRF-Token"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def split_host(host: str) -> tuple[str, str]:
    """'name:port' -> ('name', 'port'); '[::1]:8' -> ('[::1]', '8'); no port -> (host, '')."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return host, ""
        rest = host[end + 1:]
        return host[:end + 1], rest[1:] if rest.startswith(":") else ""
    name, sep, port = host.rpartition(":")
    return (name, port) if sep and port.isdigit() else (host, "")


def is_loopback_bind(bind_host: str) -> bool:
    h = bind_host.strip("[]")
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def allowed_host_names(bind_host: str, extra: Iterable[str] = ()) -> frozenset[str] | None:
    """The Host names the dashboard answers; None: any (bound to every interface
    with no --allowed-host, where the operator chose to be reachable by any name)."""
    names = {n.strip().lower() for n in extra if n.strip()}
    if is_loopback_bind(bind_host):
        return frozenset(names | set(LOOPBACK_NAMES))
    if bind_host in ("", "0.0.0.0", "::", "[::]"):
        return frozenset(names) if names else None
    b = bind_host.lower()
    return frozenset(names | {b if ":" not in b or b.startswith("[") else f"[{b}]"})


def host_ok(host_header: str | None, allowed: frozenset[str] | None) -> bool:
    if not host_header:
        return False
    if allowed is None:
        return True
    name, _port = split_host(host_header)
    return name in allowed


def origin_ok(origin: str | None, scheme: str, host_header: str | None) -> bool:
    """The POST's Origin is this dashboard's own (scheme and Host as the browser used them)."""
    if not origin or not host_header or origin == "null":
        return False
    return origin.strip().lower() == f"{scheme}://{host_header.strip().lower()}"
