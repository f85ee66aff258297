"""What a task pins: a FunctionView of one code snapshot, and the errors of the
Function Code View. Shared by the directory and etcd sources (their snapshots
live in function_snapshots.SnapshotStore).

A view keeps its snapshot alive (snapshots track their views weakly, so a task
runtime that is dropped unpins without ceremony; ``release()`` unpins early) and
serves only the sources of its own snapshot.

A not-found message names the function and the epoch for everyone; where the
code comes from and the ids it knows are marked server-only
(blockx.tenant_view): the admin and the log read them, a tenant does not.
"""
from __future__ import annotations

import weakref
from collections.abc import Mapping

from blockx.tenant_view import server_only

ENTRY_SELECTOR = "main"
DEFAULT_MAX_SOURCE_BYTES = 8 * 1024 * 1024  # the frame limit is 16 MiB; leave room for JSON escaping


class FunctionCodeError(Exception):
    """Function code is unavailable; maps to FUNCTION_NOT_FOUND / ACTIVATION_FAILED."""

    error_kind = "FUNCTION_NOT_FOUND"
    retryable = False


class FunctionNotFound(FunctionCodeError, LookupError):
    pass


class SnapshotUnavailable(FunctionCodeError, LookupError):
    """The epoch was purged (or never existed): the task cannot be activated."""


class Snapshot:
    __slots__ = ("epoch", "digests", "digest_set", "superseded_at_ms", "views")

    def __init__(self, epoch: int, digests: dict[str, str]):
        self.epoch = epoch
        self.digests = digests
        self.digest_set = frozenset(digests.values())
        self.superseded_at_ms: int | None = None
        self.views: weakref.WeakSet[FunctionView] = weakref.WeakSet()


class FunctionView:
    """One task's pinned snapshot: function id -> (digest, entry selector)."""

    __slots__ = ("epoch", "_digests", "_digest_set", "_owner", "_snap", "__weakref__")

    def __init__(self, owner, snap: Snapshot):
        self.epoch = snap.epoch
        self._digests = snap.digests
        self._digest_set = snap.digest_set
        self._owner = owner
        self._snap: Snapshot | None = snap
        snap.views.add(self)

    def resolve(self, function_id: str) -> tuple[str, str]:
        digest = self._digests.get(function_id)
        if digest is None:
            raise FunctionNotFound(self._not_found(function_id))
        return digest, ENTRY_SELECTOR

    def digest_of(self, function_id: str) -> str | None:
        return self._digests.get(function_id)

    def function_ids(self) -> list[str]:
        return sorted(self._digests)

    @property
    def digests(self) -> Mapping[str, str]:
        return self._digests

    def source_for(self, digest: str) -> str:
        # Only code of this task's own snapshot is served to its calls.
        if digest not in self._digest_set:
            raise FunctionNotFound(f"function code {digest[:16]}... is not part of code epoch {self.epoch}")
        return self._owner.source_for(digest)

    def release(self) -> None:
        snap = self._snap
        if snap is not None:
            snap.views.discard(self)
            self._snap = None

    def __enter__(self) -> FunctionView:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def _not_found(self, function_id: str) -> str:
        known = sorted(self._digests)
        listing = ", ".join(known[:10]) + (f", ... ({len(known)} in all)" if len(known) > 10 else "")
        # where the code comes from and the other functions' ids are the server's to know
        return (f"function {function_id!r} not found in code epoch {self.epoch}"
                + server_only(f"{self._owner.where}; known: {listing or 'none'}"))
