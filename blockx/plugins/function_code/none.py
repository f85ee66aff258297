"""Function Code View of a Worker with no function source configured.

A production profile serves no function until the operator names a source
(FUNCTIONS_DIR, or FUNCTIONS_SOURCE=etcd): the example functions shipped with the
package are for the dev profile only. This view has one snapshot, epoch 1, with
no function in it, so a task activates as usual and each call fails
FUNCTION_NOT_FOUND with a message that says how to configure a source."""

from __future__ import annotations

from blockx.plugins.function_code.view import FunctionView
from blockx.plugins.function_snapshots import SnapshotStore

NO_SOURCE = ("no function source is configured: set FUNCTIONS_DIR to a directory of <functionId>.py "
             "files, or FUNCTIONS_SOURCE=etcd or redis")


class FunctionCodeNone:
    """An empty Function Code View: every function id is not found."""

    def __init__(self, snapshot_retention_ms: int, *, now_ms: int = 0) -> None:
        self.where = NO_SOURCE                       # named in FunctionView's not-found messages
        self._store = SnapshotStore(snapshot_retention_ms)
        self._store.install(1, {}, now_ms, set())

    def current_epoch(self, now_ms: int) -> int:
        return self._store.epoch

    def pin(self, epoch: int, now_ms: int) -> FunctionView:
        return self._store.pin(self, epoch, now_ms, set())

    def source_for(self, digest: str) -> str:
        return self._store.source_for(digest)

    def refresh(self, now_ms: int) -> int:
        return self._store.epoch

    def retained_epochs(self) -> list[int]:
        return self._store.retained_epochs()
