"""Function Code View, directory source: FUNCTIONS_DIR holds `<functionId>.py` files.

Theory of operation:
- A snapshot maps every function id to the sha256 hex digest of its source. The
  epoch is a counter that moves exactly when a digest changes (a file edited,
  added or removed); touching a file without changing it keeps the epoch.
- A task pins the current epoch at activation (`pin`) and resolves every call,
  including subcalls, against that snapshot, so editing a function mid-task never
  mixes two versions inside one task.
- ExecuteCall carries only the digest; an executor that lacks the source asks for
  it (waitKind=function_code) and gets `source_for(digest)`. Sources are kept by
  digest, shared by the snapshots that contain them.
- Change detection is stat-based ((mtime_ns, ctime_ns, size, inode) per file) and
  runs at most once per `rescan_interval_ms`, driven by the caller's `now_ms`, so
  activations in a burst cost one dict lookup. Only files whose stat changed are
  reread. An edit that keeps all four stat fields identical within one timestamp
  tick is not seen until the file changes again (filesystem granularity).
- Retention: a snapshot stays while current, for `snapshot_retention_ms` after it
  stops being current, and for as long as a FunctionView of it is alive (views are
  tracked weakly, so a task runtime that is dropped unpins without ceremony;
  `release()` unpins early). Pinning a purged epoch is an error.
- A file that cannot be read or is not UTF-8 is left out of the snapshot, with a
  logged reason; calls to it fail with FUNCTION_NOT_FOUND rather than shipping a
  source the executor cannot compile. If the directory itself disappears the last
  snapshot stays current (a transient deploy state must not empty the Worker)."""

from __future__ import annotations

import hashlib
import logging
import os
import weakref
from collections.abc import Mapping

logger = logging.getLogger("blockx.plugins.function_code")

ENTRY_SELECTOR = "main"
DEFAULT_RESCAN_INTERVAL_MS = 100
DEFAULT_MAX_SOURCE_BYTES = 8 * 1024 * 1024  # the frame limit is 16 MiB; leave room for JSON escaping


class FunctionCodeError(Exception):
    """Function code is unavailable; maps to FUNCTION_NOT_FOUND / ACTIVATION_FAILED."""

    error_kind = "FUNCTION_NOT_FOUND"
    retryable = False


class FunctionNotFound(FunctionCodeError, LookupError):
    pass


class SnapshotUnavailable(FunctionCodeError, LookupError):
    """The epoch was purged (or never existed): the task cannot be activated."""


class _Snapshot:
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

    def __init__(self, owner: FunctionCodeDirectory, snap: _Snapshot):
        self.epoch = snap.epoch
        self._digests = snap.digests
        self._digest_set = snap.digest_set
        self._owner = owner
        self._snap: _Snapshot | None = snap
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
        return (f"function {function_id!r} not found in code epoch {self.epoch} "
                f"(functions dir {self._owner.path!r}; known: {listing or 'none'})")


class FunctionCodeDirectory:
    """The directory-backed Function Code View provider and epoch resolver."""

    def __init__(self, path: str, snapshot_retention_ms: int, *, now_ms: int = 0,
                 rescan_interval_ms: int = DEFAULT_RESCAN_INTERVAL_MS,
                 max_source_bytes: int = DEFAULT_MAX_SOURCE_BYTES):
        if snapshot_retention_ms < 0:
            raise ValueError("snapshot_retention_ms must be >= 0")
        self.path = os.path.abspath(path)
        if not os.path.isdir(self.path):
            raise FunctionCodeError(f"functions directory {path!r} does not exist or is not a directory")
        self.snapshot_retention_ms = snapshot_retention_ms
        self.rescan_interval_ms = rescan_interval_ms
        self.max_source_bytes = max_source_bytes
        # fid -> (stat signature, digest or None when unusable)
        self._files: dict[str, tuple[tuple[int, int, int, int], str | None]] = {}
        self._sources: dict[str, str] = {}  # digest -> source
        self._source_refs: dict[str, int] = {}  # digest -> number of retained snapshots holding it
        self._snapshots: dict[int, _Snapshot] = {}
        self._epoch = 0
        self._next_scan_ms = 0
        self._dir_missing_logged = False
        self._rescan(now_ms)
        if self._epoch == 0:  # an empty directory is still epoch 1
            self._install({}, now_ms)

    # --- public API ----------------------------------------------------------

    def current_epoch(self, now_ms: int) -> int:
        if now_ms >= self._next_scan_ms:
            self._rescan(now_ms)
        self._purge(now_ms)
        return self._epoch

    def pin(self, epoch: int, now_ms: int) -> FunctionView:
        self._purge(now_ms)
        snap = self._snapshots.get(epoch)
        if snap is None:
            if 0 < epoch < self._epoch:
                raise SnapshotUnavailable(
                    f"function code epoch {epoch} was purged (retention {self.snapshot_retention_ms} ms "
                    f"after it stopped being current); the current epoch is {self._epoch}")
            raise SnapshotUnavailable(f"function code epoch {epoch} does not exist "
                                      f"(current epoch is {self._epoch})")
        return FunctionView(self, snap)

    def source_for(self, digest: str) -> str:
        src = self._sources.get(digest)
        if src is None:
            raise FunctionNotFound(f"no function source with digest {digest!r} is retained")
        return src

    def refresh(self, now_ms: int) -> int:
        """Rescan now regardless of the interval; returns the current epoch."""
        self._rescan(now_ms)
        self._purge(now_ms)
        return self._epoch

    def retained_epochs(self) -> list[int]:
        return sorted(self._snapshots)

    # --- scanning --------------------------------------------------------------

    def _rescan(self, now_ms: int) -> None:
        self._next_scan_ms = now_ms + self.rescan_interval_ms
        try:
            entries = list(os.scandir(self.path))
        except OSError as exc:
            if not self._dir_missing_logged:
                logger.warning("functions directory %s cannot be listed (%s); keeping code epoch %d",
                               self.path, exc, self._epoch)
                self._dir_missing_logged = True
            return
        self._dir_missing_logged = False
        seen: dict[str, tuple[tuple[int, int, int, int], str | None]] = {}
        changed = False
        for entry in entries:
            name = entry.name
            if not name.endswith(".py") or name[0] in "._" or len(name) <= 3:
                continue
            fid = name[:-3]
            try:
                if not entry.is_file():
                    continue
                st = entry.stat()
            except OSError:
                continue
            sig = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
            old = self._files.get(fid)
            if old is not None and old[0] == sig:
                seen[fid] = old
                continue
            changed = True
            seen[fid] = (sig, self._load(entry.path, st.st_size))
        if not changed and len(seen) == len(self._files):
            return
        self._files = seen
        digests = {fid: d for fid, (_sig, d) in seen.items() if d is not None}
        current = self._snapshots.get(self._epoch)
        if current is None or current.digests != digests:
            self._install(digests, now_ms)

    def _load(self, path: str, size: int) -> str | None:
        if size > self.max_source_bytes:
            logger.warning("function source %s is %d bytes, above the %d-byte limit; skipped",
                           path, size, self.max_source_bytes)
            return None
        try:
            with open(path, "rb") as fh:
                raw = fh.read(self.max_source_bytes + 1)
        except OSError as exc:
            logger.warning("function source %s cannot be read (%s); skipped", path, exc)
            return None
        if len(raw) > self.max_source_bytes:
            logger.warning("function source %s grew above the %d-byte limit; skipped", path, self.max_source_bytes)
            return None
        try:
            source = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            logger.warning("function source %s is not UTF-8 (%s); skipped", path, exc)
            return None
        digest = hashlib.sha256(raw).hexdigest()
        self._sources.setdefault(digest, source)
        return digest

    def _install(self, digests: dict[str, str], now_ms: int) -> None:
        old = self._snapshots.get(self._epoch)
        if old is not None:
            old.superseded_at_ms = now_ms
        self._epoch += 1
        self._snapshots[self._epoch] = _Snapshot(self._epoch, digests)
        for d in set(digests.values()):
            self._source_refs[d] = self._source_refs.get(d, 0) + 1
        self._drop_unreferenced_sources()
        logger.info("function code epoch %d: %d function(s) in %s", self._epoch, len(digests), self.path)

    def _purge(self, now_ms: int) -> None:
        if len(self._snapshots) <= 1:
            return
        retention = self.snapshot_retention_ms
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
        self._drop_unreferenced_sources()

    def _drop_unreferenced_sources(self) -> None:
        # Sources read for files that never made it into a retained snapshot (or whose
        # snapshots were all purged) are dropped; the current files' sources always stay.
        live = {d for _sig, d in self._files.values() if d is not None}
        for d in [d for d in self._sources if d not in self._source_refs and d not in live]:
            del self._sources[d]
