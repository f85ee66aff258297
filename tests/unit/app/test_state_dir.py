"""STATE_DIR is created 0700 whatever the umask; an existing open one is reported,
not changed. The files the Worker and the CLI create there (the DuckDB file, a
trace written by `blockx trace -o`) are 0600 whatever the umask."""
import asyncio
import os
import stat

import pytest

from blockx.app.state_dir import ensure_state_dir


@pytest.fixture
def open_umask():
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_new_state_dir_is_0700_whatever_the_umask(tmp_path, open_umask):
    path = tmp_path / "a" / "state"
    assert ensure_state_dir(str(path)) is None
    assert mode(path) == 0o700
    assert ensure_state_dir(str(path)) is None           # again: nothing to report


def test_an_existing_open_state_dir_is_reported_and_left_alone(tmp_path):
    path = tmp_path / "shared"
    path.mkdir()
    os.chmod(path, 0o755)
    warning = ensure_state_dir(str(path))
    assert warning == (f"STATE_DIR {str(path)!r} has mode 0755: other local users can enter it; "
                       f"`chmod 700 {path}` keeps its data files private")
    assert mode(path) == 0o755


def test_a_state_dir_that_is_a_file_is_refused(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(NotADirectoryError, match="is not a directory"):
        ensure_state_dir(str(path))


def test_the_duckdb_file_is_created_0600(tmp_path, open_umask):
    from blockx.plugins.data.duck import DuckSource

    src = DuckSource("local", str(tmp_path / "db" / "local.duckdb"))
    src.cursor().execute("CREATE TABLE t (a INT)")
    assert mode(tmp_path / "db" / "local.duckdb") == 0o600
    asyncio.run(src.aclose())


def test_a_trace_file_is_written_0600(tmp_path, open_umask):
    from blockx.client.trace import TaskTrace

    tr = TaskTrace("t", "SUCCEEDED", True, False, 1, False, 1, 0, 100, b'{"traceEvents": []}')
    tr.write(tmp_path / "trace.json")
    assert mode(tmp_path / "trace.json") == 0o600
    assert (tmp_path / "trace.json").read_bytes() == b'{"traceEvents": []}'
