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
  `release()` unpins early). Pinning a purged epoch is an error. The snapshots
  themselves live in a SnapshotStore (function_snapshots.py), shared with the
  etcd source.
- A file that cannot be read or is not UTF-8 is left out of the snapshot, with a
  logged reason; calls to it fail with FUNCTION_NOT_FOUND rather than shipping a
  source the executor cannot compile. If the directory itself disappears the last
  snapshot stays current (a transient deploy state must not empty the Worker)."""

from __future__ import annotations

import logging
import os

from blockx.plugins.function_code.view import (  # noqa: F401 - the names this module has always offered
    DEFAULT_MAX_SOURCE_BYTES, ENTRY_SELECTOR, FunctionCodeError, FunctionNotFound, FunctionView,
    SnapshotUnavailable,
)
from blockx.plugins.function_snapshots import SnapshotStore

logger = logging.getLogger("blockx.plugins.function_code")

DEFAULT_RESCAN_INTERVAL_MS = 100


class FunctionCodeDirectory:
    """The directory-backed Function Code View provider and epoch resolver."""

    def __init__(self, path: str, snapshot_retention_ms: int, *, now_ms: int = 0,
                 rescan_interval_ms: int = DEFAULT_RESCAN_INTERVAL_MS,
                 max_source_bytes: int = DEFAULT_MAX_SOURCE_BYTES):
        self._store = SnapshotStore(snapshot_retention_ms)
        self.path = os.path.abspath(path)
        self.where = f"functions dir {self.path!r}"     # named in FunctionView's not-found messages
        if not os.path.isdir(self.path):
            raise FunctionCodeError(f"functions directory {path!r} does not exist or is not a directory")
        self.snapshot_retention_ms = snapshot_retention_ms
        self.rescan_interval_ms = rescan_interval_ms
        self.max_source_bytes = max_source_bytes
        # fid -> (stat signature, digest or None when unusable)
        self._files: dict[str, tuple[tuple[int, int, int, int], str | None]] = {}
        self._next_scan_ms = 0
        self._dir_missing_logged = False
        self._rescan(now_ms)
        if self._store.epoch == 0:  # an empty directory is still epoch 1
            self._install({}, now_ms)

    # --- public API ----------------------------------------------------------

    @property
    def _epoch(self) -> int:
        return self._store.epoch

    def current_epoch(self, now_ms: int) -> int:
        if now_ms >= self._next_scan_ms:
            self._rescan(now_ms)
        self._store.purge(now_ms, self._live())
        return self._store.epoch

    def pin(self, epoch: int, now_ms: int) -> FunctionView:
        return self._store.pin(self, epoch, now_ms, self._live())

    def source_for(self, digest: str) -> str:
        return self._store.source_for(digest)

    def refresh(self, now_ms: int) -> int:
        """Rescan now regardless of the interval; returns the current epoch."""
        self._rescan(now_ms)
        self._store.purge(now_ms, self._live())
        return self._store.epoch

    def retained_epochs(self) -> list[int]:
        return self._store.retained_epochs()

    def _live(self) -> set[str]:
        """The digests of the files as they are now: their sources always stay."""
        return {d for _sig, d in self._files.values() if d is not None}

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
        if self._store.current_digests() != digests:
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
        return self._store.remember(path, raw, self.max_source_bytes)

    def _install(self, digests: dict[str, str], now_ms: int) -> None:
        self._store.install(self._store.epoch + 1, digests, now_ms, self._live())
        logger.info("function code epoch %d: %d function(s) in %s", self._store.epoch, len(digests), self.path)
