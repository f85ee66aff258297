"""ServerTLS: the gRPC port's certificate, key and (for mutual TLS) client CA, and
their reload on SIGHUP.

Why dynamic credentials: grpc's `dynamic_ssl_server_credentials` asks a fetcher
for the certificate configuration at every new handshake. `reload()` (run on the
event loop by the SIGHUP handler) re-reads the files and, only when they parse,
swaps in the new configuration; the fetcher, called from a gRPC core thread,
hands it over once (returning None afterwards means "unchanged"). Established
connections keep their session, so running tasks, WatchTasks streams and
sessions are not dropped: only new connections see the new certificate. A
reload that fails (a missing file, a key that is not PEM) is logged and the old
certificate stays in use.

With a client CA, a client must present a certificate signed by it, or its
handshake fails (mutual TLS)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import grpc

log = logging.getLogger("blockx.tls")


class TLSFileError(ValueError):
    """A certificate, key or CA file cannot be read or is not PEM."""


def read_pem(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise TLSFileError(f"cannot read the {what} {path!r}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in data:
        raise TLSFileError(f"the {what} {path!r} is not a PEM file")
    return data


@dataclass(frozen=True, slots=True)
class ServerTLSFiles:
    cert: str
    key: str
    client_ca: str = ""        # set: mutual TLS, clients must present a certificate signed by it


class ServerTLS:
    def __init__(self, files: ServerTLSFiles) -> None:
        self.files = files
        self._lock = threading.Lock()
        self._config = self._load()       # a start-up failure raises TLSFileError
        self._pending = None              # a reloaded config not yet handed to gRPC
        self.reloads = 0

    @property
    def mutual(self) -> bool:
        return bool(self.files.client_ca)

    def _load(self):
        f = self.files
        cert = read_pem(f.cert, "TLS certificate (WORKER_TLS_CERT)")
        key = read_pem(f.key, "TLS key (WORKER_TLS_KEY)")
        ca = read_pem(f.client_ca, "client CA (WORKER_TLS_CLIENT_CA)") if f.client_ca else None
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(self._config, self._fetch,
                                                   require_client_authentication=self.mutual)

    def _fetch(self):
        with self._lock:
            config, self._pending = self._pending, None
        return config

    def reload(self) -> bool:
        """Re-read the files; True when the new certificate is in use for new connections."""
        try:
            config = self._load()
        except TLSFileError as exc:
            log.error("tls_reload_failed", extra={"event": "tls_reload_failed", "fields": {
                "error": f"{exc}; keeping the current certificate"}})
            return False
        with self._lock:
            self._config = self._pending = config
        self.reloads += 1
        log.info("tls_reloaded", extra={"event": "tls_reloaded", "fields": {
            "cert": self.files.cert, "reloads": self.reloads}})
        return True
