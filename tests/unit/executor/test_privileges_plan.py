"""Which directories an executor leaving root must cover and bind back (the
mount work itself runs in tests/e2e/test_attack_executors.py)."""
import os
import pathlib
import shutil
import tempfile

import pytest

from blockx_executor.privileges import PrivilegeError, blocked_ancestor, needed_dirs, plan

NOBODY = 65534


@pytest.fixture
def tmp_path():
    """A tree under /tmp that others may enter (pytest's own is in a 0700 directory)."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="bx-priv-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_the_topmost_closed_ancestor_is_covered_and_only_needed_dirs_come_back(tmp_path):
    home = tmp_path / "home"                        # like /root: 0700, owned by someone else
    (home / "py" / "lib").mkdir(parents=True)
    (home / "py" / "bin").mkdir()
    (home / "secrets").mkdir()
    (tmp_path / "open" / "venv").mkdir(parents=True)
    for d in (tmp_path, home / "py", home / "py" / "lib", home / "py" / "bin", tmp_path / "open",
              tmp_path / "open" / "venv"):
        d.chmod(0o755)
    home.chmod(0o700)
    lib, venv = str(home / "py" / "lib"), str(tmp_path / "open" / "venv")
    assert blocked_ancestor(lib, NOBODY, {NOBODY}) == str(home)
    assert blocked_ancestor(venv, NOBODY, {NOBODY}) is None
    assert plan([lib, str(home / "py" / "bin"), venv], NOBODY, {NOBODY}) == {
        str(home): [lib, str(home / "py" / "bin")]}


def test_a_needed_dir_closed_itself_is_a_clear_error(tmp_path):
    home = tmp_path / "home"
    (home / "py").mkdir(parents=True)
    tmp_path.chmod(0o755)
    home.chmod(0o700)
    (home / "py").chmod(0o700)
    with pytest.raises(PrivilegeError, match="cannot read .*py.*mode 0700"):
        plan([str(home / "py")], NOBODY, {NOBODY})


def test_needed_dirs_hold_the_interpreter_and_the_packages():
    import blockx  # noqa: F401 - loaded before the drop in a real executor
    dirs = needed_dirs()
    import sys
    assert os.path.realpath(sys.base_prefix) in dirs
    assert any(os.path.realpath(p) in dirs for p in blockx.__path__)
