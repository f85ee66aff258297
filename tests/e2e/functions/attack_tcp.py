"""attack_tcp(port): open a TCP connection to a loopback port of the host."""
import socket


def main(port):
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        s.sendall(b"hello from an executor")
    return "connected"
