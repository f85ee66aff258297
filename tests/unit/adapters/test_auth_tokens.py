"""The tokens file (`name token` a line): parsing, errors naming the line, the
constant-time lookup, reload keeping the tokens in use on a bad file, and the
generated local token (0600, reused)."""
import os
import pathlib
import stat

import pytest

from blockx.adapters.auth_tokens import (TokenFileError, TokenStore, ensure_local_token, local_token_path,
                                         parse_tokens, read_tokens)
from blockx.credentials import local_token

A, B = "alice-token-0123456789", "bob-token-0123456789ab"


def test_parse_skips_comments_and_blank_lines_and_marks_admin():
    tokens = parse_tokens(f"# team\n\nalice {A}\n  bob   {B}  \nadmin admin-token-0123456789\nalice {A}x\n", "f")
    names = sorted((c.name, c.admin) for c in tokens.values())
    assert names == [("admin", True), ("alice", False), ("alice", False), ("bob", False)]


@pytest.mark.parametrize("text, words", [
    ("alice", ["line 1", "two fields", "got 1 field"]),
    (f"alice {A} extra", ["line 1", "got 3 fields"]),
    (f"# c\nal ice {A}", ["line 2", "got 3 fields"]),
    (f"al/ice {A}", ["line 1", "'al/ice'", "letters, digits"]),
    ("alice short", ["line 1", "16 to 512", "it has 5"]),
    ("alice " + "x" * 513, ["it has 513"]),
    (f"alice {A}\nbob {A}", ["line 2", "already the token of 'alice'"]),
    ("alice tøken-with-non-ascii-x", ["printable ASCII"]),
])
def test_bad_lines_name_the_line_and_the_fix(text, words):
    with pytest.raises(TokenFileError) as ei:
        parse_tokens(text, "the tokens file 'f'")
    for w in words:
        assert w in str(ei.value), str(ei.value)


def test_read_tokens_refuses_a_missing_or_empty_file(tmp_path):
    with pytest.raises(TokenFileError, match="cannot read the tokens file"):
        read_tokens(str(tmp_path / "missing"))
    (tmp_path / "empty").write_text("# nothing\n")
    with pytest.raises(TokenFileError, match="holds no token"):
        read_tokens(str(tmp_path / "empty"))


def test_identify_and_reload(tmp_path):
    f = tmp_path / "tokens"
    f.write_text(f"alice {A}\nbob {B}\n")
    store = TokenStore(str(f))
    assert store.identify(A).name == "alice" and store.identify(B).name == "bob"
    assert store.identify(A[:-1]) is None and store.identify("") is None and store.identify(A + "x") is None
    assert store.names == ["alice", "bob"]
    f.write_text(f"alice {A}\ncarol carol-token-0123456789\n")
    assert store.reload() and store.reloads == 1
    assert store.identify(B) is None and store.identify("carol-token-0123456789").name == "carol"
    f.write_text("alice short\n")                      # a bad file keeps the tokens in use
    assert not store.reload() and store.identify(A).name == "alice"
    f.unlink()
    assert not store.reload() and store.identify(A).name == "alice"


def test_local_token_is_0600_reused_and_found_by_the_client(tmp_path):
    state = tmp_path / "state"
    path = ensure_local_token(str(state))
    assert path == local_token_path(str(state)) and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    name, token = pathlib.Path(path).read_text().split()
    assert name == "admin" and len(token) >= 32
    assert TokenStore(path).identify(token).admin
    os.chmod(path, 0o644)
    assert ensure_local_token(str(state)) == path and pathlib.Path(path).read_text().split()[1] == token
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert local_token({"STATE_DIR": str(state)}) == token


def test_a_local_token_file_another_user_could_write_is_a_problem(tmp_path):
    from blockx.adapters.auth_tokens import local_token_problem
    state = tmp_path / "state"
    assert local_token_problem(str(state)) is None                 # missing: created 0700 at start
    path = ensure_local_token(str(state))
    assert local_token_problem(str(state)) is None                 # the worker's own file, in its own dir
    os.chmod(state, 0o777)
    assert "other users can write into it" in local_token_problem(str(state))
    os.chmod(state, 0o700)
    os.unlink(path)
    other = tmp_path / "elsewhere"
    other.write_text("admin planted-0123456789abcdef\n")
    os.symlink(other, path)
    problem = local_token_problem(str(state))
    assert "is not a regular file" in problem and "WORKER_AUTH_TOKENS_FILE" in problem
    assert "planted" not in problem
