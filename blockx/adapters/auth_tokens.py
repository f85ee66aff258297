"""TokenStore: the bearer tokens the Worker accepts, read from a tokens file and
re-read on SIGHUP; and the token the Worker generates for its own host.

The tokens file holds one ``name token`` per line; blank lines and lines
starting with ``#`` are skipped. A name is the identity that owns the tasks it
submits (letters, digits and ``._@-``, at most 64 characters); the name
``admin`` sees every task. A name may have several tokens (to rotate one
without a gap); a token belongs to one name. A token is 16 to 512 printable
ASCII characters without spaces.

Lookups compare the SHA-256 digest of the presented token with every stored
digest by ``hmac.compare_digest``, without stopping at a match, so the time an
answer takes does not depend on how much of a token was right or which one it
was. A reload that fails (a missing file, a bad line) is logged and the
tokens in use stay.

Without a tokens file, the Worker writes ``admin <random token>`` to
``<stateDir>/auth-token`` (mode 0600, reused when it already exists) and accepts
that token: the CLI and ``blockx.client`` on the same host read it from there
(blockx.credentials). That token is admin, so the directory and the file
are opened without following a link and checked on the open descriptor, each
time they are read (blockx.adapters.private_dir): a directory or file another
local user owns or could write is refused, never used."""
from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
from collections.abc import Callable

from blockx.adapters.private_dir import (UnsafePath, create_private_file, open_private_dir, open_private_file,
                                         read_fd)
from blockx.core.owners import Caller

log = logging.getLogger("blockx.auth")

ADMIN = "admin"
LOCAL_TOKEN_FILE = "auth-token"          # under the state directory
MIN_TOKEN_CHARS = 16
MAX_TOKEN_CHARS = 512
_LOCAL_TOKEN_MAX_BYTES = 64 * 1024     # one `admin <token>` line; a larger file is not ours
_NAME = re.compile(r"[A-Za-z0-9._@-]{1,64}")
_TOKEN = re.compile(r"[\x21-\x7e]+")


class TokenFileError(ValueError):
    """The tokens file cannot be read or has a bad line."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def parse_tokens(text: str, source: str) -> dict[bytes, Caller]:
    """SHA-256 digest of each token -> its identity; TokenFileError names the line."""
    out: dict[bytes, Caller] = {}
    names: dict[bytes, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        where = f"{source} line {n}"
        if len(parts) != 2:
            raise TokenFileError(f"{where}: expected `name token` (two fields separated by a space), "
                                 f"got {len(parts)} field{'s' if len(parts) != 1 else ''}")
        name, token = parts
        if not _NAME.fullmatch(name):
            raise TokenFileError(f"{where}: the name {name[:80]!r} is not 1-64 letters, digits or ._@-")
        if not _TOKEN.fullmatch(token) or not MIN_TOKEN_CHARS <= len(token) <= MAX_TOKEN_CHARS:
            raise TokenFileError(f"{where}: the token of {name!r} must be {MIN_TOKEN_CHARS} to {MAX_TOKEN_CHARS} "
                                 f"printable ASCII characters (it has {len(token)}); generate one with "
                                 "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`")
        d = _digest(token)
        if d in out and names[d] != name:
            raise TokenFileError(f"{where}: this token is already the token of {names[d]!r}; "
                                 "a token belongs to one name")
        out[d] = Caller(name, admin=name == ADMIN)
        names[d] = name
    return out


def read_tokens(path: str) -> dict[bytes, Caller]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"cannot read the tokens file {path!r} (WORKER_AUTH_TOKENS_FILE): "
                             f"{getattr(exc, 'strerror', None) or exc}") from None
    tokens = parse_tokens(text, f"the tokens file {path!r}")
    if not tokens:
        raise TokenFileError(f"the tokens file {path!r} (WORKER_AUTH_TOKENS_FILE) holds no token: "
                             "add a `name token` line")
    return tokens


class TokenStore:
    def __init__(self, path: str, read: Callable[[str], dict[bytes, Caller]] = read_tokens) -> None:
        self.path = path
        self._read = read                   # read_local_tokens for the generated <stateDir>/auth-token
        self._entries = tuple(read(path).items())   # a start-up failure raises TokenFileError
        self.reloads = 0

    def identify(self, token: str) -> Caller | None:
        """The identity of ``token``, None when it is not one of the configured tokens.
        Every stored digest is compared (constant time each, no early exit)."""
        d = _digest(token)
        found = None
        for known, caller in self._entries:
            if hmac.compare_digest(known, d):
                found = caller
        return found

    @property
    def names(self) -> list[str]:
        return sorted({c.name for _, c in self._entries})

    def reload(self) -> bool:
        """Re-read the file (SIGHUP); True when the new tokens are in use."""
        try:
            tokens = self._read(self.path)
        except TokenFileError as exc:
            log.error("auth_tokens_reload_failed", extra={"event": "auth_tokens_reload_failed", "fields": {
                "error": f"{exc}; keeping the tokens in use"}})
            return False
        self._entries = tuple(tokens.items())
        self.reloads += 1
        log.info("auth_tokens_reloaded", extra={"event": "auth_tokens_reloaded", "fields": {
            "file": self.path, "names": self.names, "reloads": self.reloads}})
        return True


def local_token_path(state_dir: str) -> str:
    return os.path.join(state_dir, LOCAL_TOKEN_FILE)


def local_token_problem(state_dir: str) -> str | None:
    """Why ``<state_dir>/auth-token`` cannot be trusted, or None (the config check,
    before start). Its token is admin, so another local user who could write the
    file (the directory is theirs or open to their writes, the file is theirs, or a
    link to a file elsewhere) would choose the admin token. Nothing is created or
    changed here; the use checks again (ensure_local_token, read_local_tokens),
    since the directory may appear between this check and the start."""
    try:
        dfd, _ = open_private_dir(state_dir, "STATE_DIR", create=False)
    except FileNotFoundError:
        return None                                   # created 0700 at start
    except UnsafePath as exc:
        return _why(str(exc))
    except OSError as exc:
        return f"STATE_DIR {state_dir!r} cannot be read: {exc.strerror or exc}"
    try:
        os.close(open_private_file(dfd, LOCAL_TOKEN_FILE, local_token_path(state_dir)))
    except FileNotFoundError:
        return None
    except UnsafePath as exc:
        return _why(str(exc))
    except OSError as exc:
        return f"{local_token_path(state_dir)!r} cannot be read: {exc.strerror or exc}"
    finally:
        os.close(dfd)
    return None


def _why(problem: str) -> str:
    return (f"{problem}; until then another local user could choose the token the worker takes as admin "
            f"from {LOCAL_TOKEN_FILE} (or name a tokens file: WORKER_AUTH_TOKENS_FILE)")


def _local_token_text(state_dir: str, create: bool) -> str:
    """The content of ``<state_dir>/auth-token``, read from the descriptor that was
    checked; written first with a new random token when missing and ``create``.
    UnsafePath when the directory or the file is not the worker's own."""
    path = local_token_path(state_dir)
    dfd, _ = open_private_dir(state_dir, "STATE_DIR", create=create)
    try:
        if create:
            try:
                wfd = create_private_file(dfd, LOCAL_TOKEN_FILE)
            except FileExistsError:
                pass
            else:
                text = f"{ADMIN} {secrets.token_urlsafe(32)}\n"
                with os.fdopen(wfd, "w", encoding="ascii") as f:
                    f.write(text)
                return text
        raw = read_fd(open_private_file(dfd, LOCAL_TOKEN_FILE, path), _LOCAL_TOKEN_MAX_BYTES + 1)
    finally:
        os.close(dfd)
    if len(raw) > _LOCAL_TOKEN_MAX_BYTES:
        raise UnsafePath(f"{path!r} is larger than {_LOCAL_TOKEN_MAX_BYTES} bytes: it is not the token file the "
                         "worker writes; remove it and start again (the worker writes a new one)")
    return raw.decode("utf-8", "surrogateescape")


def ensure_local_token(state_dir: str) -> str:
    """``<state_dir>/auth-token`` holding ``admin <token>`` (mode 0600): written with a
    new random token when missing, reused (and its mode tightened) when present and
    the worker's own, in a directory of the worker's own that no one else can write.
    Returns its path; UnsafePath (naming the path, the owner and the fix) otherwise.
    Read it with ``read_local_tokens``, which checks again."""
    try:
        _local_token_text(state_dir, create=True)
    except UnsafePath as exc:
        raise UnsafePath(_why(str(exc))) from None
    return local_token_path(state_dir)


def read_local_tokens(path: str) -> dict[bytes, Caller]:
    """The tokens of the generated ``<stateDir>/auth-token`` at ``path`` (a
    TokenStore's reader: at start and on SIGHUP), read from the descriptor checked
    as ensure_local_token checks; TokenFileError when it cannot be trusted."""
    try:
        text = _local_token_text(os.path.dirname(path), create=False)
    except UnsafePath as exc:
        raise TokenFileError(_why(str(exc))) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"cannot read the worker's token file {path!r}: "
                             f"{getattr(exc, 'strerror', None) or exc}") from None
    tokens = parse_tokens(text, f"the worker's token file {path!r}")
    if not tokens:
        raise TokenFileError(f"the worker's token file {path!r} holds no token: remove it and start again "
                             "(the worker writes a new one)")
    return tokens
