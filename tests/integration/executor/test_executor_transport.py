"""The executor's Connection over a real socketpair: a non-blocking socket
whose send timeout is kept by the Connection itself."""

import socket
import threading
import time

import pytest

from blockx_executor.transport import RECV_BYTES, Connection, ConnectionClosed


def _pair(**kw):
    a, b = socket.socketpair()
    return Connection(a, **kw), b


def test_recv_returns_what_is_there_none_when_empty_and_empty_bytes_at_eof():
    conn, peer = _pair()
    assert conn.recv() is None                     # nothing to read: a spurious wakeup
    peer.sendall(b"abc")
    got = conn.recv()
    assert got == b"abc" and type(got) is bytes
    peer.sendall(b"x" * 10)
    again = conn.recv()
    assert again == b"x" * 10 and got == b"abc"    # the kept buffer is not shared with results
    peer.close()
    assert conn.recv() == b""


def test_recv_reads_at_most_its_buffer_and_the_rest_next_time():
    conn, peer = _pair()
    data = bytes(range(256)) * ((RECV_BYTES * 2) // 256 + 3)
    t = threading.Thread(target=peer.sendall, args=(data,))
    t.start()
    got = bytearray()
    deadline = time.monotonic() + 10
    while len(got) < len(data) and time.monotonic() < deadline:
        chunk = conn.recv()
        if chunk:
            assert len(chunk) <= RECV_BYTES
            got += chunk
    t.join()
    assert bytes(got) == data


def test_a_send_larger_than_the_socket_buffer_arrives_whole_while_the_peer_reads_slowly():
    conn, peer = _pair()
    data = b"".join(i.to_bytes(4, "big") for i in range(2_000_000 // 4))
    got = bytearray()

    def reader():
        while len(got) < len(data):
            time.sleep(0.001)
            got.extend(peer.recv(65536))

    t = threading.Thread(target=reader)
    t.start()
    conn.queue(data[:1000])
    conn.send_now(data[1000:])
    t.join(10)
    assert bytes(got) == data


def test_a_peer_that_stops_reading_is_reported_lost_after_the_send_timeout():
    conn, peer = _pair(send_timeout_s=0.3)
    t0 = time.monotonic()
    with pytest.raises(ConnectionClosed) as ei:
        for _ in range(10_000):                   # far more than the socket buffers hold
            conn.send_now(b"y" * 65536)
    took = time.monotonic() - t0
    assert not ei.value.clean and "read nothing for 0.3 s" in str(ei.value)
    assert 0.25 <= took < 5
    with pytest.raises(ConnectionClosed):       # and it stays closed
        conn.send_now(b"z")
    peer.close()


def test_a_closed_peer_ends_the_connection_cleanly():
    conn, peer = _pair()
    peer.close()
    with pytest.raises(ConnectionClosed) as ei:
        conn.send_now(b"hello")
    assert ei.value.clean
