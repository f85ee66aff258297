"""ExecutorCredentials: the one-time secret each executor attaches with.

Rules:
- The pool issues a fresh secret for an executor id right before it spawns
  that executor (issue()), and hands it over through an inherited pipe, never
  through the environment or the command line (spawn.ChildProcess's
  `secret`). A restart issues a new one; the previous secret is void.
- The executor presents it in its first Heartbeat (`attachSecret`). check()
  accepts only the current secret of a known executor id, compared in constant
  time, and consumes it: a secret attaches once. Whoever learns it afterwards
  (user code reading the executor's memory) can attach nobody.
- An id the pool never issued a secret for (a forger's invention) is refused.

The table is small (one entry per pool slot) and only touched at spawn and at
attach, never per call."""

from __future__ import annotations

import hmac
import secrets

__all__ = ["ExecutorCredentials", "SECRET_BYTES"]

SECRET_BYTES = 32


class ExecutorCredentials:
    __slots__ = ("_secrets",)

    def __init__(self) -> None:
        self._secrets: dict[str, str] = {}   # executor id -> the secret its next attach must bring

    def issue(self, executor_id: str) -> str:
        """A new secret for the executor about to start as `executor_id`."""
        secret = secrets.token_hex(SECRET_BYTES)
        self._secrets[executor_id] = secret
        return secret

    def revoke(self, executor_id: str) -> None:
        self._secrets.pop(executor_id, None)

    def check(self, executor_id: str, presented) -> str | None:
        """None when `presented` is the executor's current secret (then consumed);
        otherwise why the attach is refused (the secret is never part of it)."""
        expected = self._secrets.get(executor_id)
        if expected is None:
            return f"no executor {executor_id!r:.80} is expected to attach (unknown id, or its secret was used)"
        if type(presented) is not str or not presented:
            return f"attach as {executor_id!r} without an attachSecret"
        if not hmac.compare_digest(presented.encode("utf-8", "replace"), expected.encode()):
            return f"attach as {executor_id!r} with a wrong attachSecret"
        del self._secrets[executor_id]
        return None

    def __contains__(self, executor_id: str) -> bool:
        return executor_id in self._secrets
