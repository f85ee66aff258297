"""Reaching a Worker's address: ready, or why not, at once and in words a person
can act on.

A client used to wait for its channel to turn READY for the whole connect
timeout (10 s), while gRPC retried underneath: a mistyped port or a stopped
Worker took that long to report, as DEADLINE_EXCEEDED or "cannot reach".
``wait_ready`` follows the channel's connectivity instead and stops at the first
failed attempt, naming what happened:

- ``NothingListens``: the connection was refused (no process on that port):
  "nothing listens at ADDR (connection refused)";
- ``NoAnswer``: no answer within the connect timeout (about a second by
  default): a host that drops the packets, or a port that accepts TCP and never
  speaks gRPC: "no answer from ADDR within T s";
- ``Unreachable``, the base of both: a host that does not resolve, a network that
  cannot be reached, a port that answers but fails the gRPC / TLS handshake.

Why a connection attempt failed is not told by gRPC's connectivity states, so a
failed attempt is followed by one plain TCP connect to the same address (bounded,
on loopback or the network the channel used): refused, silent, or open. All are
Unavailable (UNAVAILABLE), raised without retrying: retrying is for a Worker that
answered UNAVAILABLE (draining, no slot), not for an address where none is."""
from __future__ import annotations

import asyncio
import socket

import grpc

from blockx.client.errors import Unavailable

DEFAULT_CONNECT_TIMEOUT_S = 1.0
_PROBE_MAX_S = 1.0


class Unreachable(Unavailable):
    """No Worker answered at the address; nothing was sent to it."""


class NothingListens(Unreachable):
    """The address refused the connection: no process listens on that port."""


class NoAnswer(Unreachable):
    """Nothing answered at the address within the connect timeout."""


def split_target(addr: str) -> tuple[str, int] | None:
    """(host, port) of a host:port or [v6]:port target; None for any other gRPC
    target form (unix:, dns:///...), which is not probed."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or "/" in addr:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        return None
    return (host or "127.0.0.1"), int(port)


async def tcp_probe(addr: str, timeout_s: float) -> str:
    """One TCP connect to ``addr``: "open", "refused", "silent" (no answer within
    ``timeout_s``), "unresolved", "unprobed" (not a host:port), or the OS's words."""
    target = split_target(addr)
    if target is None:
        return "unprobed"
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(*target), max(0.05, timeout_s))
    except asyncio.TimeoutError:
        return "silent"
    except ConnectionRefusedError:
        return "refused"
    except socket.gaierror:
        return "unresolved"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return "open"


async def why_not(addr: str, probe_s: float, *, tls: bool) -> Unreachable:
    """The exception that says why a connection attempt to ``addr`` failed (one TCP
    connect of at most ``probe_s`` tells)."""
    seen = await tcp_probe(addr, min(_PROBE_MAX_S, probe_s))
    if seen == "refused":
        return NothingListens(f"nothing listens at {addr} (connection refused)")
    if seen == "silent":
        return NoAnswer(f"no answer from {addr} (a TCP connection to it is not answered)")
    if seen == "unresolved":
        return Unreachable(f"cannot connect to {addr}: its host name does not resolve")
    if seen == "open":
        hint = ("is it a TLS port, with a certificate the --tls-ca / BLOCKX_TLS_CA given signed?" if tls else
                "a TLS port? then give the CA: --tls-ca / BLOCKX_TLS_CA")
        return Unreachable(f"{addr} accepts connections, but the gRPC handshake failed ({hint})")
    if seen == "unprobed":
        return Unreachable(f"cannot connect to {addr}")
    return Unreachable(f"cannot connect to {addr}: {seen}")


async def wait_ready(channel: grpc.aio.Channel, addr: str, timeout_s: float, *, tls: bool = False) -> None:
    """Return once ``channel`` is READY; raise an Unreachable as soon as one
    connection attempt failed, or NoAnswer after ``timeout_s`` without one."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    state = channel.get_state(try_to_connect=True)
    while state != grpc.ChannelConnectivity.READY:
        if state == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            raise await why_not(addr, max(0.1, deadline - loop.time()), tls=tls)
        if state == grpc.ChannelConnectivity.SHUTDOWN:
            raise Unreachable(f"the channel to {addr} is closed")
        left = deadline - loop.time()
        try:
            if left <= 0:
                raise asyncio.TimeoutError
            await asyncio.wait_for(channel.wait_for_state_change(state), left)
        except asyncio.TimeoutError:
            raise NoAnswer(f"no answer from {addr} within {timeout_s:g} s") from None
        state = channel.get_state(try_to_connect=True)
