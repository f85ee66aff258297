"""How many long-lived streams of one kind (TaskSession, WatchTasks) are open,
in all and per identity, against the settings that bound them. A stream past a
bound is refused at once with RESOURCE_EXHAUSTED and ``refusal(caller)``, which
names the setting. An identity's bound is its fair share: admin
and the unrestricted caller (no authentication) are held to the Worker-wide
bound only."""
from __future__ import annotations


class OpenStreams:
    __slots__ = ("kind", "limit", "setting", "open", "per_identity", "identity_setting", "_by_identity")

    def __init__(self, kind: str, limit: int, setting: str, per_identity: int = 0,
                 identity_setting: str = "") -> None:
        self.kind = kind
        self.limit = limit
        self.setting = setting
        self.open = 0
        self.per_identity = per_identity           # 0: no per-identity bound
        self.identity_setting = identity_setting
        self._by_identity: dict[str, int] = {}     # identity -> its open streams (no zero entries)

    def _limited(self, caller) -> str | None:
        return None if caller is None or caller.admin or not self.per_identity else caller.name

    def enter(self, caller=None) -> bool:
        """Count one more stream of ``caller``; False (and nothing counted) past a bound."""
        if self.open >= self.limit:
            return False
        name = self._limited(caller)
        if name is not None:
            n = self._by_identity.get(name, 0)
            if n >= self.per_identity:
                return False
            self._by_identity[name] = n + 1
        self.open += 1
        return True

    def leave(self, caller=None) -> None:
        self.open -= 1
        name = self._limited(caller)
        if name is None:
            return
        by = self._by_identity
        n = by.get(name, 0) - 1
        if n > 0:
            by[name] = n
        else:
            by.pop(name, None)

    def identity_full(self, caller) -> bool:
        """True when ``caller``'s own share (not the Worker-wide bound) is what refuses it."""
        name = self._limited(caller)
        return name is not None and self.open < self.limit and self._by_identity.get(name, 0) >= self.per_identity

    def by_identity(self) -> dict[str, int]:
        """identity -> open streams, for the identities with a share (a copy; metrics)."""
        return dict(self._by_identity)

    def refusal(self, caller=None) -> str:
        """Why ``enter(caller)`` answered False."""
        if self.identity_full(caller):
            n = self._by_identity.get(caller.name, 0)
            return (f"identity {caller.name!r} has {n} {self.kind} streams open on this worker, its share "
                    f"({self.identity_setting}); close one, or share one {self.kind} stream for many tasks")
        return (f"{self.open} {self.kind} streams are open on this worker, its limit ({self.setting}); "
                f"close one, share one {self.kind} stream for many tasks, or retry later")
