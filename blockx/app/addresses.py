"""Network addresses and the executor socket path.

Addresses are Go-style "host:port" strings (":8081" = every interface, IPv6 in
brackets); `split_host_port` is the one parser, shared by validation and by the
helpers that turn listenAddr into what grpc binds and what the Coordinator dials.
The executor socket lives in a per-user 0700 directory so no other local user can
connect to it or replace it."""

from __future__ import annotations

import ipaddress
import os
import socket
import tempfile



def split_host_port(addr: str) -> tuple[str, int]:
    """("host", port) of "host:port", "[v6]:port" or ":port"; ValueError otherwise."""
    if not isinstance(addr, str) or ":" not in addr:
        raise ValueError(f"{addr!r} is not host:port")
    if addr.startswith("["):
        end = addr.find("]")
        if end < 0 or addr[end + 1:end + 2] != ":":
            raise ValueError(f"{addr!r} is not [host]:port")
        host, port_text = addr[1:end], addr[end + 2:]
    else:
        host, _, port_text = addr.rpartition(":")
        if ":" in host:
            raise ValueError(f"{addr!r}: an IPv6 host needs brackets, e.g. [::1]:8081")
    if not port_text.isascii() or not port_text.isdigit():
        raise ValueError(f"{addr!r}: port {port_text!r} is not a number")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"{addr!r}: port {port} is out of range 0..65535")
    if any(c.isspace() for c in host):
        raise ValueError(f"{addr!r}: host contains whitespace")
    return host, port


def grpc_listen_addr(listen_addr: str) -> str:
    """listenAddr in the form grpc's add_insecure_port takes (":8081" -> "[::]:8081")."""
    host, port = split_host_port(listen_addr)
    if host == "":
        host = "[::]"
    elif ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"


def resolved_worker_addr(worker_addr: str, listen_addr: str, bound_port: int | None = None) -> str:
    """worker_addr, or (when empty) the outbound IP plus the listen port (or the port
    actually bound, for ":0"); the etcd key suffix and the address the Coordinator dials."""
    if worker_addr:
        return worker_addr
    host, port = split_host_port(listen_addr)
    if bound_port is not None:
        port = bound_port
    if host in ("", "0.0.0.0", "::"):
        host = outbound_ip()
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"


def outbound_ip() -> str:
    """The local IP used to reach the outside (no packet is sent: UDP connect only
    selects a route); 127.0.0.1 when there is no route."""
    for family, target in ((socket.AF_INET, ("192.0.2.1", 9)), (socket.AF_INET6, ("2001:db8::1", 9))):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect(target)
                ip = s.getsockname()[0]
                if ip and not ipaddress.ip_address(ip).is_unspecified:
                    return ip
        except OSError:
            continue
    return "127.0.0.1"


def default_socket_path() -> str:
    """A per-process socket path inside a per-user directory.

    $XDG_RUNTIME_DIR is already private to the user (mode 0700, tmpfs); /tmp is
    not, so the executor adapter's listener creates the directory 0700 and refuses
    one that another user owns or can enter (adapters/executor/listener.py)."""
    base = os.environ.get("XDG_RUNTIME_DIR", "")
    if not base or not os.path.isdir(base):
        base = tempfile.gettempdir()
    return os.path.join(base, f"blockx-{os.getuid()}", f"worker-{os.getpid()}.sock")
