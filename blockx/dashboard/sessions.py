"""SessionStore: the dashboard's login sessions, in memory, bounded and expiring.

A session is created only after a worker accepted the token it was made with
(blockx.dashboard.app's login), so an unauthenticated caller cannot fill the
store. It holds the token (the dashboard calls the workers with it, never with
another identity's), whether the workers call it admin, and the CSRF token every
POST of the session must carry. The cookie holds a random id; the store keys the
session by that id's SHA-256, so the ids themselves are not kept. Sessions end
after ``idle_s`` without a request or ``max_age_s`` after login, whichever comes
first; at ``capacity`` the least recently used one is dropped. No clock read here:
callers pass ``now`` (monotonic seconds)."""
from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field

DEFAULT_CAPACITY = 1000
DEFAULT_IDLE_S = 30 * 60.0
DEFAULT_MAX_AGE_S = 12 * 3600.0


def _key(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).digest()


def token_fingerprint(token: str) -> str:
    """A short, stable name for a token that does not reveal it (shown to a tenant,
    whose identity name the workers do not tell the dashboard)."""
    return hashlib.sha256(b"blockx-dashboard:" + token.encode("utf-8", "surrogatepass")).hexdigest()[:10]


@dataclass(slots=True)
class Session:
    token: str = field(repr=False)
    admin: bool
    identity: str                 # "admin", or "tenant <fingerprint>" (or the name when the dashboard knows it)
    csrf: str = field(repr=False)
    created: float
    last_seen: float

    def csrf_ok(self, presented: str | None) -> bool:
        """Constant-time comparison with the session's CSRF token."""
        if not presented:
            return False
        return hmac.compare_digest(presented.encode("utf-8", "surrogatepass"), self.csrf.encode())


class SessionStore:
    def __init__(self, *, capacity: int = DEFAULT_CAPACITY, idle_s: float = DEFAULT_IDLE_S,
                 max_age_s: float = DEFAULT_MAX_AGE_S) -> None:
        if capacity < 1:
            raise ValueError("the session capacity must be at least 1")
        self.capacity = capacity
        self.idle_s = idle_s
        self.max_age_s = max_age_s
        self._by_key: OrderedDict[bytes, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_key)

    def create(self, token: str, *, admin: bool, identity: str, now: float) -> tuple[str, Session]:
        """A new session: (the id for the cookie, the session)."""
        self.expire(now)
        while len(self._by_key) >= self.capacity:
            self._by_key.popitem(last=False)
        sid = secrets.token_urlsafe(32)
        s = Session(token=token, admin=admin, identity=identity, csrf=secrets.token_urlsafe(32),
                    created=now, last_seen=now)
        self._by_key[_key(sid)] = s
        return sid, s

    def get(self, session_id: str | None, now: float) -> Session | None:
        """The live session of ``session_id`` (touched), or None."""
        if not session_id or len(session_id) > 128:
            return None
        k = _key(session_id)
        s = self._by_key.get(k)
        if s is None:
            return None
        if self._expired(s, now):
            del self._by_key[k]
            return None
        s.last_seen = now
        self._by_key.move_to_end(k)
        return s

    def drop(self, session_id: str | None) -> None:
        if session_id:
            self._by_key.pop(_key(session_id), None)

    def expire(self, now: float) -> int:
        """Drop every expired session; how many went."""
        dead = [k for k, s in self._by_key.items() if self._expired(s, now)]
        for k in dead:
            del self._by_key[k]
        return len(dead)

    def tokens(self) -> set[str]:
        """The tokens of the live sessions (the client pool keeps connections for these only)."""
        return {s.token for s in self._by_key.values()}

    def _expired(self, s: Session, now: float) -> bool:
        return now - s.last_seen > self.idle_s or now - s.created > self.max_age_s
