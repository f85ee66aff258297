"""Where a client's bearer token comes from: explicit, $BLOCKX_TOKEN, else the
token the Worker generated into this host's STATE_DIR (resolved as the Worker
resolves it)."""
import os

from blockx.adapters.auth_tokens import ensure_local_token
from blockx.credentials import auth_metadata, local_token, resolve_token, state_dir


def test_state_dir_resolves_as_the_worker_does(tmp_path, monkeypatch):
    from blockx.app.config import default_state_dir

    assert state_dir({"STATE_DIR": "/srv/x"}) == "/srv/x"
    assert state_dir({"XDG_STATE_HOME": "/xdg"}) == "/xdg/blockx"
    monkeypatch.delenv("STATE_DIR", raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    assert state_dir({}) == default_state_dir()


def test_explicit_then_env_then_the_local_file(tmp_path):
    state = tmp_path / "state"
    token = open(ensure_local_token(str(state))).read().split()[1]
    env = {"STATE_DIR": str(state)}
    assert local_token(env) == token and resolve_token(env=env) == token
    assert resolve_token(env={**env, "BLOCKX_TOKEN": "from-env"}) == "from-env"
    assert resolve_token("explicit", env=env) == "explicit"
    assert resolve_token(None, env=env) is None and resolve_token("", env=env) is None
    assert resolve_token(env={"STATE_DIR": str(tmp_path / "elsewhere")}) is None
    os.makedirs(tmp_path / "blockx")
    ensure_local_token(str(tmp_path / "blockx"))
    assert local_token({"XDG_STATE_HOME": str(tmp_path)}) is not None


def test_metadata():
    assert auth_metadata(None) is None and auth_metadata("") is None
    assert auth_metadata("t0k") == (("authorization", "Bearer t0k"),)


def test_the_local_token_goes_only_to_an_address_on_this_host(tmp_path):
    from blockx.credentials import is_local_address
    state = tmp_path / "state"
    token = open(ensure_local_token(str(state))).read().split()[1]
    env = {"STATE_DIR": str(state)}
    for addr in ("127.0.0.1:8081", "localhost:8081", "[::1]:8081", "unix:/run/blockx.sock", "127.1.2.3:1"):
        assert is_local_address(addr) and resolve_token(env=env, addr=addr) == token, addr
    for addr in ("10.0.0.5:8081", "worker-1:8081", "[::]:8081", "[fd00::2]:8081", "dns:///localhost:8081",
                 "evil.example:443"):
        assert not is_local_address(addr) and resolve_token(env=env, addr=addr) is None, addr
    # Given on purpose (BLOCKX_TOKEN, --token), a token goes wherever the caller says.
    assert resolve_token(env={**env, "BLOCKX_TOKEN": "from-env"}, addr="10.0.0.5:8081") == "from-env"
    assert resolve_token("explicit", env=env, addr="10.0.0.5:8081") == "explicit"
