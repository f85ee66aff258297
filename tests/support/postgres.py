"""A real, throwaway PostgreSQL cluster for tests.

`PostgresServer` runs Debian's `initdb` and `pg_ctl` on a free loopback port with
a private data directory under /tmp, and removes it after. PostgreSQL refuses to
run as root, so when the tests run as root the cluster belongs to an unprivileged
user (`postgres` when it exists, else `nobody`): the directory is handed to that
user and every server command runs under its uid. Authentication is `trust` on
loopback only; the superuser is `blockx`.

Usage:
    with PostgresServer() as pg:
        pg.dsn                              # postgresql://blockx@127.0.0.1:P/postgres
    postgres_server = postgres_fixture(scope="session")   # in a conftest
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.binaries import missing
from tests.support.etcd import free_port

__all__ = ["PostgresServer", "PostgresUnavailable", "pg_bin_dir", "postgres_fixture"]

START_TIMEOUT_S = 30.0
SUPERUSER = "blockx"


class PostgresUnavailable(RuntimeError):
    """PostgreSQL is not installed or did not start."""


def pg_bin_dir() -> str | None:
    """Where initdb and pg_ctl are: $PG_BIN, then Debian's newest
    /usr/lib/postgresql/N/bin, then PATH."""
    explicit = os.environ.get("PG_BIN")
    if explicit:
        return explicit if os.access(os.path.join(explicit, "initdb"), os.X_OK) else None
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda p: int(p.split("/")[-3]) if p.split("/")[-3].isdigit() else 0)
    if versions:
        return os.path.dirname(versions[-1])
    found = shutil.which("initdb")
    return os.path.dirname(os.path.realpath(found)) if found else None


def _run_as() -> pwd.struct_passwd | None:
    """The unprivileged account to run PostgreSQL under, or None (we are not root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise PostgresUnavailable("running as root and no unprivileged user (postgres, nobody) exists")


class PostgresServer:
    def __init__(self) -> None:
        self.bin = pg_bin_dir()
        self.base = Path(tempfile.mkdtemp(prefix="blockx-pg-"))
        self.data_dir = self.base / "data"
        self.log_path = self.base / "postgres.log"
        self.port = 0
        self._user = _run_as()
        self._started = False

    @property
    def dsn(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    def _cmd(self, args: list[str], **kw) -> subprocess.CompletedProcess:
        env = dict(os.environ, LC_ALL="C", LANG="C")
        preexec = None
        if self._user is not None:
            uid, gid = self._user.pw_uid, self._user.pw_gid
            env["HOME"] = str(self.base)

            def preexec() -> None:  # noqa: E306 - drop root before exec
                os.setgid(gid)
                os.setgroups([])
                os.setuid(uid)
        return subprocess.run(args, env=env, preexec_fn=preexec, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, cwd=self.base, **kw)

    def start(self) -> PostgresServer:
        if self.bin is None:
            raise PostgresUnavailable("PostgreSQL (initdb, pg_ctl) is not installed: run `make postgres`")
        if self._user is not None:
            os.chown(self.base, self._user.pw_uid, self._user.pw_gid)
            os.chmod(self.base, 0o700)
        if not self.data_dir.exists():
            r = self._cmd([f"{self.bin}/initdb", "-D", str(self.data_dir), "-U", SUPERUSER, "--auth=trust",
                           "--encoding=UTF8", "--no-sync"], timeout=START_TIMEOUT_S)
            if r.returncode != 0:
                raise PostgresUnavailable(f"initdb failed: {r.stderr.strip() or r.stdout.strip()}")
        last = ""
        for _ in range(3):
            self.port = free_port()
            opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.base} -c fsync=off "
                    "-c synchronous_commit=off -c full_page_writes=off -c max_connections=50")
            r = self._cmd([f"{self.bin}/pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_path),
                           "-o", opts, "-w", "-t", str(int(START_TIMEOUT_S)), "start"],
                          timeout=START_TIMEOUT_S + 5)
            if r.returncode == 0:
                self._started = True
                return self
            last = r.stderr.strip() or r.stdout.strip()
            time.sleep(0.2)
        raise PostgresUnavailable(f"pg_ctl start failed: {last}\n{self.log_tail()}")

    def stop(self) -> None:
        if self._started:
            self._cmd([f"{self.bin}/pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop"],
                      timeout=30)
            self._started = False

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> PostgresServer:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()


def postgres_fixture(scope: str = "session", name: str = "postgres_server"):
    """A pytest fixture yielding a started `PostgresServer`. A missing PostgreSQL
    skips the test with the fix in the message under `make check`, and fails it
    under `make test` (tests/support/binaries.py): CI must run these suites."""

    @pytest.fixture(scope=scope, name=name)
    def _fixture() -> Iterator[PostgresServer]:
        if pg_bin_dir() is None:
            missing("PostgreSQL", "run `make postgres` (apt-get install postgresql) or set PG_BIN")
        with PostgresServer() as server:
            yield server

    return _fixture
