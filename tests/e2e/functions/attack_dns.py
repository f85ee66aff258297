"""attack_dns(name): resolve a host name."""
import socket


def main(name):
    return sorted({ai[4][0] for ai in socket.getaddrinfo(name, 80)})
