"""KeyedCodeSource: the Function Code View surface of a source whose code is a
map of function id -> source in a store the Worker follows (etcd, Redis).

Rules:
- ``_values`` maps each function id the store holds to its source's digest
  (None: a value that cannot be used); the digests in it are live, so their
  sources always stay in the SnapshotStore whatever its retention.
- The view starts at epoch 0, empty, until the store first answers.
- The subclass decides when the store changed and installs the new snapshot
  through ``_store`` (``advance``); everything a task asks of the view (the
  current epoch, a pin, a source by digest) is answered here, once for both
  sources."""
from __future__ import annotations

from blockx.plugins.function_code.view import FunctionView
from blockx.plugins.function_snapshots import SnapshotStore


class KeyedCodeSource:
    def __init__(self, snapshot_retention_ms: int, now_ms: int) -> None:
        self._store = SnapshotStore(snapshot_retention_ms)
        self.snapshot_retention_ms = snapshot_retention_ms
        self._values: dict[str, str | None] = {}    # fid -> digest (None: unusable value)
        self._store.install(0, {}, now_ms, set())   # epoch 0, empty, until the store first answers

    @property
    def _epoch(self) -> int:
        return self._store.epoch

    def current_epoch(self, now_ms: int) -> int:
        self._store.purge(now_ms, self._live())
        return self._store.epoch

    def pin(self, epoch: int, now_ms: int) -> FunctionView:
        return self._store.pin(self, epoch, now_ms, self._live())

    def source_for(self, digest: str) -> str:
        return self._store.source_for(digest)

    def retained_epochs(self) -> list[int]:
        return self._store.retained_epochs()

    def _live(self) -> set[str]:
        """The digests the store holds now: their sources always stay."""
        return {d for d in self._values.values() if d is not None}


__all__ = ["KeyedCodeSource"]
