"""Real certificates made for a test with the `openssl` CLI: a CA, server
certificates for 127.0.0.1 / localhost signed by it, client certificates.
EC P-256 keys, so making a set takes a few tens of milliseconds."""
from __future__ import annotations

import pathlib
import subprocess
from dataclasses import dataclass


def _openssl(*args: str, cwd: pathlib.Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, timeout=30)


@dataclass(frozen=True)
class CertPair:
    cert: str
    key: str


class CertAuthority:
    def __init__(self, directory: pathlib.Path, name: str = "ca") -> None:
        self.dir = pathlib.Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.cert = str(self.dir / f"{name}.pem")
        self.key = str(self.dir / f"{name}.key")
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", self.key, "-out", self.cert, "-days", "2", "-subj", f"/CN=blockx test {name}",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                 cwd=self.dir)

    def issue(self, name: str, *, server: bool = True, cn: str | None = None, subject: str | None = None,
              san: str | None = None) -> CertPair:
        """``subject``: an openssl -subj (``/O=tenant-42/CN=admin``), else ``/CN=<cn or name>``;
        ``san``: a client certificate's subjectAltName (``URI:spiffe://acme/ops,DNS:ops.acme``)."""
        key, csr, cert = (str(self.dir / f"{name}.{ext}") for ext in ("key", "csr", "pem"))
        ext = self.dir / f"{name}.ext"
        if server:
            ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
        else:
            ext.write_text((f"subjectAltName={san}\n" if san else "") + "extendedKeyUsage=clientAuth\n")
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
                 "-out", csr, "-subj", subject or f"/CN={cn or name}", cwd=self.dir)
        _openssl("x509", "-req", "-in", csr, "-CA", self.cert, "-CAkey", self.key, "-CAcreateserial",
                 "-out", cert, "-days", "2", "-extfile", str(ext), cwd=self.dir)
        return CertPair(cert, key)


def fingerprint(pem_path: str) -> str:
    out = subprocess.run(["openssl", "x509", "-noout", "-fingerprint", "-sha256", "-in", pem_path],
                         check=True, capture_output=True, text=True, timeout=10).stdout
    return out.strip().split("=", 1)[1]
