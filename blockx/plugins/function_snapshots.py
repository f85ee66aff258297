"""The retained code snapshots of a Function Code View source (directory, etcd or Redis).

Rules, the same for every source:
- A snapshot maps each function id to the sha256 digest of its source and has
  an epoch; the newest is current. A task pins an epoch (``pin``) and keeps that
  snapshot for as long as it holds the FunctionView.
- A snapshot is kept while current, for ``retention_ms`` after it stops being
  current, and while any FunctionView of it is alive (``purge``).
- Sources are kept by digest while a retained snapshot refers to them or the
  source still offers them (``live`` in ``drop_unreferenced``).

The source decides when to install a snapshot and which epoch it gets; the store
owns the snapshots, the sources and the reference counts.
"""
from __future__ import annotations

import hashlib
import logging

from blockx.plugins.function_code.view import FunctionNotFound, FunctionView, SnapshotUnavailable, Snapshot

logger = logging.getLogger("blockx.plugins.function_code")


class SnapshotStore:
    __slots__ = ("retention_ms", "epoch", "_snapshots", "_sources", "_source_refs")

    def __init__(self, retention_ms: int) -> None:
        if retention_ms < 0:
            raise ValueError("snapshot_retention_ms must be >= 0")
        self.retention_ms = retention_ms
        self.epoch = 0
        self._snapshots: dict[int, Snapshot] = {}
        self._sources: dict[str, str] = {}          # digest -> source
        self._source_refs: dict[str, int] = {}      # digest -> retained snapshots holding it

    # ---- reading --------------------------------------------------------------------

    def current_digests(self) -> dict[str, str] | None:
        snap = self._snapshots.get(self.epoch)
        return snap.digests if snap is not None else None

    def pin(self, owner, epoch: int, now_ms: int, live: set[str]) -> FunctionView:
        self.purge(now_ms, live)
        snap = self._snapshots.get(epoch)
        if snap is None:
            if epoch < self.epoch:
                raise SnapshotUnavailable(
                    f"function code epoch {epoch} was purged (retention {self.retention_ms} ms "
                    f"after it stopped being current); the current epoch is {self.epoch}")
            raise SnapshotUnavailable(f"function code epoch {epoch} does not exist "
                                      f"(current epoch is {self.epoch})")
        return FunctionView(owner, snap)

    def source_for(self, digest: str) -> str:
        src = self._sources.get(digest)
        if src is None:
            raise FunctionNotFound(f"no function source with digest {digest!r} is retained")
        return src

    def retained_epochs(self) -> list[int]:
        return sorted(self._snapshots)

    # ---- changes ----------------------------------------------------------------------

    def remember(self, name: str, raw: bytes, max_bytes: int) -> str | None:
        """Keep the source ``raw`` (read from ``name``); its digest, or None (logged)
        when it cannot be shipped: over ``max_bytes`` or not UTF-8."""
        if len(raw) > max_bytes:
            logger.warning("function source %s is %d bytes, above the %d-byte limit; skipped",
                           name, len(raw), max_bytes)
            return None
        try:
            source = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            logger.warning("function source %s is not UTF-8 (%s); skipped", name, exc)
            return None
        digest = hashlib.sha256(raw).hexdigest()
        self._sources.setdefault(digest, source)
        return digest

    def install(self, epoch: int, digests: dict[str, str], now_ms: int, live: set[str]) -> None:
        """``digests`` becomes current at ``epoch`` (greater than the current one)."""
        old = self._snapshots.get(self.epoch)
        if old is not None:
            old.superseded_at_ms = now_ms
        self.epoch = epoch
        self._snapshots[epoch] = Snapshot(epoch, digests)
        for d in set(digests.values()):
            self._source_refs[d] = self._source_refs.get(d, 0) + 1
        self.drop_unreferenced(live)

    def advance(self, version: int, digests: dict[str, str], now_ms: int, live: set[str]) -> bool:
        """Install ``digests`` unless they are the current code; the epoch is the source's
        ``version`` when it is above the current epoch, else epoch + 1 (epochs only grow,
        even when the store behind the source was wiped and counts again from low).
        Whether a snapshot was installed."""
        if self.current_digests() == digests:
            self.drop_unreferenced(live)        # same code (or still empty at epoch 0)
            return False
        self.install(version if version > self.epoch else self.epoch + 1, digests, now_ms, live)
        return True

    def purge(self, now_ms: int, live: set[str]) -> None:
        if len(self._snapshots) <= 1:
            return
        retention = self.retention_ms
        doomed = [s for s in self._snapshots.values()
                  if s.superseded_at_ms is not None and now_ms - s.superseded_at_ms >= retention
                  and len(s.views) == 0]
        if not doomed:
            return
        for s in doomed:
            del self._snapshots[s.epoch]
            for d in set(s.digests.values()):
                n = self._source_refs.get(d, 0) - 1
                if n <= 0:
                    self._source_refs.pop(d, None)
                else:
                    self._source_refs[d] = n
        self.drop_unreferenced(live)

    def drop_unreferenced(self, live: set[str]) -> None:
        """Sources no retained snapshot holds and the source no longer offers go."""
        for d in [d for d in self._sources if d not in self._source_refs and d not in live]:
            del self._sources[d]
