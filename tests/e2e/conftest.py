"""Fixtures of the end-to-end suites: real worker processes with real executors.

Each worker gets a private functions directory: the shipped examples plus the
test functions in tests/e2e/functions."""
import pathlib
import shutil
import tempfile

import pytest

from tests.support.auth import use_harness_token
from tests.support.worker import EXAMPLES, WorkerProcess

# Workers start with WORKER_AUTH_MODE=token (the default) and accept the harness's
# token; blockx.client and the CLI (in process and as subprocesses) send it.
use_harness_token()

HERE = pathlib.Path(__file__).resolve().parent


def make_functions_dir(tmp: pathlib.Path) -> pathlib.Path:
    d = tmp / "functions"
    d.mkdir(parents=True, exist_ok=True)
    for src in list(EXAMPLES.glob("*.py")) + list((HERE / "functions").glob("*.py")):
        shutil.copy(src, d / src.name)
    return d


@pytest.fixture
def executor_tmp():
    """A directory the executors' user-code may write: under a root Worker,
    process-mode executors run as EXECUTOR_USER (nobody), who cannot enter
    pytest's own tmp_path (a 0700 directory of root)."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="bx-exec-", dir="/tmp"))
    d.chmod(0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def functions_dir(tmp_path):
    return make_functions_dir(tmp_path)


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    """One shared worker for a module's tests that do not disturb it."""
    fdir = make_functions_dir(tmp_path_factory.mktemp("fn"))
    w = WorkerProcess({"TASK_SLOTS": "32", "RESULT_RETENTION_MS": "60000"}, functions_dir=fdir)
    w.start()
    try:
        yield w
    finally:
        w.stop()


@pytest.fixture
def start_worker(functions_dir):
    """Factory for a dedicated worker with its own environment."""
    started = []

    def _start(env=None, *, ready=True, executors=2, profile="block", tls=None):
        w = WorkerProcess(env, functions_dir=functions_dir, executors=executors, profile=profile, tls=tls)
        started.append(w)
        return w.start(ready=ready)

    yield _start
    for w in started:
        try:
            w.stop()
        except AssertionError:
            pass


@pytest.fixture
def pg_db(postgres_server):
    """A fresh database in the session's PostgreSQL cluster: its DSN."""
    import asyncio
    import uuid

    import asyncpg

    name = "e2e_" + uuid.uuid4().hex[:10]

    async def create():
        conn = await asyncpg.connect(postgres_server.dsn)
        try:
            await conn.execute(f"CREATE DATABASE {name}")
        finally:
            await conn.close()
    asyncio.run(create())
    return postgres_server.dsn.rsplit("/", 1)[0] + "/" + name
