"""Another local user prepares STATE_DIR or its auth-token before the Worker uses
them: the Worker refuses, at the moment of use, whatever the config check saw.

The other user is simulated by chown to uid 65534 (nobody), so those tests need
root (CI runs as root); the link and mode tests run as anyone. Each refusal must
name the path and say what to do; no planted token is ever accepted."""
import os
import pathlib
import stat

import pytest

from blockx.adapters.auth_tokens import (TokenFileError, TokenStore, ensure_local_token, local_token_problem,
                                         read_local_tokens)
from blockx.app.state_dir import ensure_state_dir

OTHER_UID = 65534
PLANTED = "planted-by-another-user-0123456789"
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="simulating another user needs chown (root)")


def plant_dir(path: pathlib.Path, uid: int = OTHER_UID, mode: int = 0o755, token: bool = True) -> None:
    """What another user does: their own directory, with their own admin token in it."""
    path.mkdir(parents=True)
    if token:
        (path / "auth-token").write_text(f"admin {PLANTED}\n")
        os.chmod(path / "auth-token", 0o644)
        os.chown(path / "auth-token", uid, uid)
    os.chmod(path, mode)
    os.chown(path, uid, uid)


def local_store(state: pathlib.Path) -> TokenStore:
    """What the Worker does at start without a tokens file (blockx.app.run.authenticator)."""
    return TokenStore(ensure_local_token(str(state)), read=read_local_tokens)


def refusal(state: pathlib.Path) -> str:
    """The message of the refusal to use ``state``'s token; fails the test when
    the Worker would take a token from there."""
    try:
        store = local_store(state)
    except Exception as exc:  # noqa: BLE001 - the kind is asserted by the callers' words
        return str(exc)
    assert store.identify(PLANTED) is None, "the planted token is accepted as admin"
    pytest.fail("the token was used although the directory is not the worker's")


@as_root
def test_a_state_dir_another_user_created_is_refused(tmp_path):
    state = tmp_path / "state"
    plant_dir(state, token=False)
    with pytest.raises(Exception, match="belongs to uid 65534") as exc:
        ensure_state_dir(str(state))
    assert str(state) in str(exc.value) and "0700" in str(exc.value)


@as_root
def test_the_token_of_a_state_dir_another_user_created_is_never_used(tmp_path):
    state = tmp_path / "state"
    plant_dir(state)
    why = refusal(state)
    assert str(state) in why and "uid 65534" in why and "remove it" in why
    assert PLANTED not in why


@as_root
def test_a_token_file_another_user_owns_is_never_used(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "auth-token").write_text(f"admin {PLANTED}\n")
    os.chmod(state / "auth-token", 0o600)
    os.chown(state / "auth-token", OTHER_UID, OTHER_UID)
    why = refusal(state)
    assert str(state / "auth-token") in why and "uid 65534" in why


def test_a_state_dir_that_is_a_symbolic_link_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (real / "auth-token").write_text(f"admin {PLANTED}\n")
    os.chmod(real / "auth-token", 0o600)
    link = tmp_path / "state"
    link.symlink_to(real)
    with pytest.raises(Exception, match="is a symbolic link") as exc:
        ensure_state_dir(str(link))
    assert str(real) in str(exc.value)           # says which directory to name instead
    why = refusal(link)
    assert "symbolic link" in why and str(link) in why
    with pytest.raises(Exception, match="is a symbolic link"):
        ensure_state_dir(str(link) + "/")        # a trailing slash would follow the link


def test_a_token_file_that_is_a_symbolic_link_is_never_followed(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text(f"admin {PLANTED}\n")
    os.chmod(elsewhere, 0o600)
    (state / "auth-token").symlink_to(elsewhere)
    why = refusal(state)
    assert "symbolic link" in why and str(state / "auth-token") in why


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777, 0o1777])
def test_a_state_dir_others_can_write_into_is_refused(tmp_path, mode):
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, mode)
    with pytest.raises(Exception, match="other users can write into it"):
        ensure_state_dir(str(state))
    why = refusal(state)
    assert f"{mode & 0o7777:04o}" in why and "chmod 700" in why
    assert not (state / "auth-token").exists()    # nothing written into it


def test_a_token_file_with_a_second_name_is_never_used(tmp_path):
    state = tmp_path / "state"
    path = ensure_local_token(str(state))
    os.link(path, tmp_path / "copy")
    why = refusal(state)
    assert "2 names" in why


@as_root
def test_the_window_between_the_config_check_and_the_use_is_closed(tmp_path):
    """The config check runs first (blockx serve validates, then starts): it sees no
    STATE_DIR, which is fine, the worker creates it. Another user creates it with
    their token in between; the use must see that, not trust the earlier check."""
    state = tmp_path / "state"
    assert local_token_problem(str(state)) is None       # the check at validation: nothing there yet
    plant_dir(state, mode=0o700)                          # the other user wins the race
    why = refusal(state)
    assert "uid 65534" in why and str(state) in why


@as_root
def test_the_token_is_checked_again_when_it_is_reloaded(tmp_path):
    state = tmp_path / "state"
    store = local_store(state)
    own = pathlib.Path(state / "auth-token").read_text().split()[1]
    assert store.identify(own).admin
    os.unlink(state / "auth-token")
    (state / "auth-token").write_text(f"admin {PLANTED}\n")
    os.chown(state / "auth-token", OTHER_UID, OTHER_UID)
    assert not store.reload()                             # refused; the tokens in use stay
    assert store.identify(PLANTED) is None and store.identify(own).admin
    with pytest.raises(TokenFileError, match="uid 65534"):
        read_local_tokens(str(state / "auth-token"))


def test_the_worker_own_state_dir_and_token_are_used(tmp_path):
    state = tmp_path / "a" / "state"
    old = os.umask(0)
    try:
        assert ensure_state_dir(str(state)) is None
        store = local_store(state)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(state / "auth-token").st_mode) == 0o600
    token = (state / "auth-token").read_text().split()[1]
    assert store.identify(token).admin and local_store(state).identify(token).admin   # reused


def test_a_fifo_in_place_of_the_token_file_is_refused_without_blocking(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.mkfifo(state / "auth-token", 0o600)           # an open for reading would wait for a writer
    why = refusal(state)
    assert "is not a regular file" in why and str(state / "auth-token") in why
