"""The systemd notification protocol (sd_notify), for `Type=notify` units.

systemd passes a datagram socket in ``$NOTIFY_SOCKET`` (a filesystem path, or an
abstract name starting with ``@``). The Worker sends ``READY=1`` once it is
ready (executors healthy, health SERVING, registration started) and
``STOPPING=1`` when its drain begins, each with a ``STATUS=`` line that
``systemctl status`` shows. Without ``$NOTIFY_SOCKET`` (not under systemd) every
call does nothing. A failed send is logged once and never stops the Worker:
systemd then reports the unit as not ready within its start timeout, which is
what an operator should see.
"""
from __future__ import annotations

import logging
import os
import socket

from blockx.log_event import log_event

log = logging.getLogger("blockx.systemd")


class SystemdNotifier:
    """Sends state lines to the socket named by ``NOTIFY_SOCKET`` (read once)."""

    def __init__(self, address: str | None = None) -> None:
        address = os.environ.get("NOTIFY_SOCKET") if address is None else address
        if address and address.startswith("@"):
            address = "\0" + address[1:]           # the abstract namespace
        self.address = address or None
        self._warned = False

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *lines: str) -> bool:
        """Send ``lines`` as one datagram; True when it was sent."""
        if self.address is None:
            return False
        payload = "\n".join(lines).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.connect(self.address)
                s.sendall(payload)
            return True
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log_event(log, "systemd_notify_failed", error=f"{type(exc).__name__}: {exc}",
                          socket=self.address.replace("\0", "@"), level=logging.WARNING)
            return False

    def ready(self, status: str) -> bool:
        return self.notify("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def stopping(self, status: str) -> bool:
        return self.notify("STOPPING=1", f"STATUS={status}")
