"""etcd endpoints: ETCD_ENDPOINTS / --etcd text -> [(host, port)], and the gRPC
target of one. Shared by the Worker's publisher and watches and the client's
registry view, so it imports nothing beyond the standard library."""
from __future__ import annotations

from collections.abc import Iterable

__all__ = ["etcd_target", "parse_endpoints"]


def parse_endpoints(value: str | Iterable[str] | None) -> list[tuple[str, int]]:
    """ETCD_ENDPOINTS -> [(host, port), ...]; "none" / "" / None -> [] (disabled).

    Accepts a comma-separated string or a list; entries may be `host:port`,
    `http://host:port`, `[v6]:port` or a bare host (port 2379).
    """
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    out: list[tuple[str, int]] = []
    for raw in items:
        item = str(raw).strip()
        if not item:
            continue
        if item.lower() == "none":
            if len([i for i in items if str(i).strip()]) > 1:
                raise ValueError(f"ETCD_ENDPOINTS {value!r}: 'none' cannot be combined with endpoints")
            return []
        if item.startswith("https://"):
            raise ValueError(f"etcd endpoint {item!r}: write host:port; TLS towards etcd is turned on "
                             "by ETCD_CA_CERT (and ETCD_CERT / ETCD_KEY for a client certificate)")
        if item.startswith("http://"):
            item = item[len("http://"):]
        item = item.rstrip("/")
        if item.startswith("["):
            host, sep, rest = item[1:].partition("]")
            if not sep or (rest and not rest.startswith(":")):
                raise ValueError(f"etcd endpoint {raw!r}: bad IPv6 form, expected [addr]:port")
            port_s = rest[1:] if rest else "2379"
        elif item.count(":") == 1:
            host, _, port_s = item.partition(":")
        elif ":" not in item:
            host, port_s = item, "2379"
        else:
            raise ValueError(f"etcd endpoint {raw!r}: write IPv6 addresses as [addr]:port")
        if not host:
            raise ValueError(f"etcd endpoint {raw!r}: missing host")
        try:
            port = int(port_s)
        except ValueError:
            raise ValueError(f"etcd endpoint {raw!r}: port {port_s!r} is not a number") from None
        if not 0 < port <= 65535:
            raise ValueError(f"etcd endpoint {raw!r}: port {port} out of range 1..65535")
        out.append((host, port))
    return out


def etcd_target(endpoint: tuple[str, int]) -> str:
    host, port = endpoint
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
