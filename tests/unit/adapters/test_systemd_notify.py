"""SystemdNotifier against real unix datagram sockets the test owns."""
from __future__ import annotations

import os
import socket
import uuid

from blockx.adapters.systemd_notify import SystemdNotifier


def _receiver(address: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(address)
    s.settimeout(5)
    return s


def test_ready_and_stopping_reach_a_path_socket(tmp_path):
    path = str(tmp_path / "notify")
    with _receiver(path) as rx:
        n = SystemdNotifier(path)
        assert n.enabled and n.ready("ready: 2 executors")
        lines = rx.recv(4096).decode().split("\n")
        assert lines[0] == "READY=1" and "STATUS=ready: 2 executors" in lines
        assert f"MAINPID={os.getpid()}" in lines
        assert n.stopping("draining")
        assert rx.recv(4096).decode().split("\n") == ["STOPPING=1", "STATUS=draining"]


def test_an_abstract_socket_name_starting_with_at():
    name = "blockx-test-" + uuid.uuid4().hex
    with _receiver("\0" + name) as rx:
        assert SystemdNotifier("@" + name).ready("ok")
        assert rx.recv(4096).startswith(b"READY=1\n")


def test_without_notify_socket_it_does_nothing(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    n = SystemdNotifier()
    assert not n.enabled and n.ready("x") is False and n.stopping("x") is False


def test_a_dead_socket_is_reported_once_and_never_raises(tmp_path, caplog):
    n = SystemdNotifier(str(tmp_path / "nobody-listens"))
    assert n.ready("x") is False and n.stopping("y") is False
    assert [r for r in caplog.records if r.getMessage() == "systemd_notify_failed"].__len__() == 1
