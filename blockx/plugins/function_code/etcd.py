"""Function Code View, etcd source (FUNCTIONS_SOURCE=etcd): `/blockx/functions/<id>` = source.

Theory of operation (the directory source's rules, with etcd as the store):
- A snapshot maps every function id to the sha256 hex digest of its source. The
  epoch is the etcd revision of the last change that altered the code: the
  prefix is read once (epoch = the read's revision), then watched; each etcd
  revision under the prefix that changes a digest installs a new snapshot at that
  revision. A put that keeps every digest (the same file pushed again) keeps the
  epoch. `blockx functions push` writes a whole directory in one transaction,
  which is one revision, so a task never sees half a push.
- A task pins the current epoch at activation (`pin`) and resolves every call
  against that snapshot; retention is exactly the directory source's: a
  snapshot stays while current, for `snapshot_retention_ms` after it stops being
  current, and while a FunctionView of it is alive.
- etcd down: the last snapshot stays current (the watch reconnects and rereads
  the prefix, installing a new epoch only if the code changed meanwhile). Before
  the first read the view is epoch 0, empty: calls fail FUNCTION_NOT_FOUND.
- Epochs only grow: if etcd answers with a revision at or below the current
  epoch (a wiped and recreated etcd), the new snapshot takes epoch + 1.
- A value that is not UTF-8, is larger than `max_source_bytes`, or whose key is
  not a valid function id is left out (logged), as the directory source does.

`apply_reset` / `apply_events` are the synchronous state changes (tested without
etcd); `start` / `stop` run the PrefixWatch that feeds them on the Worker's loop.
"""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from blockx.plugins.function_code.view import DEFAULT_MAX_SOURCE_BYTES
from blockx.plugins.function_code.keyed import KeyedCodeSource

if TYPE_CHECKING:
    from blockx.etcd.prefix_watch import PrefixWatch

logger = logging.getLogger("blockx.plugins.function_code")

DEFAULT_FUNCTIONS_PREFIX = "/blockx/functions/"
# What `blockx functions push` accepts as a function id (the file name without .py).
FUNCTION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


def valid_function_id(fid: str) -> bool:
    return bool(FUNCTION_ID_RE.match(fid)) and not fid.endswith(".py")


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class FunctionCodeEtcd(KeyedCodeSource):
    """The etcd-backed Function Code View provider and epoch resolver."""

    def __init__(self, endpoints: str | Iterable[str] | None, prefix: str, snapshot_retention_ms: int, *,
                 now_ms: int = 0, max_source_bytes: int = DEFAULT_MAX_SOURCE_BYTES,
                 clock_ms: Callable[[], int] = _wall_ms) -> None:
        if not prefix.endswith("/"):
            raise ValueError(f"functions prefix {prefix!r} must end with '/'")
        super().__init__(snapshot_retention_ms, now_ms)
        self.endpoints = endpoints
        self.prefix = prefix
        self.where = f"etcd {prefix}"        # named in FunctionView's not-found messages
        self.max_source_bytes = max_source_bytes
        self._clock_ms = clock_ms
        self._watch: PrefixWatch | None = None

    # ---- etcd -------------------------------------------------------------------------

    async def start(self, wait_s: float = 5.0) -> bool:
        """Read the prefix (waiting up to ``wait_s``) and follow it; False if etcd has
        not answered yet (the view fills in when it does)."""
        from blockx.etcd.prefix_watch import PrefixWatch

        if self._watch is None:
            assert self.endpoints is not None, "FunctionCodeEtcd.start() needs etcd endpoints"
            self._watch = PrefixWatch(self.endpoints, self.prefix, self._on_reset, self._on_events,
                                      name="function-code-etcd", logger=logger)
        loaded = await self._watch.start(wait_s)
        if not loaded:
            logger.warning("function code: etcd %s not readable yet (%s); no functions until it answers",
                           ",".join(self._watch.endpoints), self._watch.last_error or "no answer")
        return loaded

    async def stop(self) -> None:
        if self._watch is not None:
            await self._watch.stop()

    def _on_reset(self, revision: int, kvs: dict[bytes, tuple[bytes, int]]) -> None:
        self.apply_reset(revision, {k: v for k, (v, _r) in kvs.items()}, self._clock_ms())

    def _on_events(self, revision: int, events: list[tuple[bool, bytes, bytes]]) -> None:
        self.apply_events(revision, events, self._clock_ms())

    # ---- state changes --------------------------------------------------------------------

    def apply_reset(self, revision: int, kvs: dict[bytes, bytes], now_ms: int) -> int:
        """The complete prefix as of ``revision``; returns the current epoch."""
        values: dict[str, str | None] = {}
        for key, value in kvs.items():
            fid = self._fid(key)
            if fid is not None:
                values[fid] = self._load(fid, value)
        self._values = values
        self._maybe_install(revision, now_ms)
        return self._epoch

    def apply_events(self, revision: int, events: list[tuple[bool, bytes, bytes]], now_ms: int) -> int:
        """One etcd revision's puts and deletes under the prefix; returns the current epoch."""
        for is_put, key, value in events:
            fid = self._fid(key)
            if fid is None:
                continue
            if is_put:
                self._values[fid] = self._load(fid, value)
            else:
                self._values.pop(fid, None)
        self._maybe_install(revision, now_ms)
        return self._epoch

    def _fid(self, key: bytes) -> str | None:
        try:
            fid = key.decode("utf-8")[len(self.prefix):]
        except UnicodeDecodeError:
            logger.warning("function key %r is not UTF-8; ignored", key)
            return None
        if not valid_function_id(fid):
            logger.warning("function key %r does not name a valid function id; ignored", key)
            return None
        return fid

    def _load(self, fid: str, raw: bytes) -> str | None:
        return self._store.remember(f"{fid} ({self.prefix}{fid})", raw, self.max_source_bytes)

    def _maybe_install(self, revision: int, now_ms: int) -> None:
        digests = {fid: d for fid, d in self._values.items() if d is not None}
        if self._store.advance(revision, digests, now_ms, self._live()):
            logger.info("function code epoch %d: %d function(s) from etcd %s", self._store.epoch, len(digests),
                        self.prefix)
