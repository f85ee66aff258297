"""AuditGate, the Orchestrator's code audit: may this code run?

AUDIT_MODE:
- off (default): every call is dispatched; nothing is looked up.
- warn: every call is dispatched; code whose digest is not approved is logged
  once per digest (event audit_unapproved).
- enforce: code whose digest is not approved is never sent to an executor: the
  call fails AUDIT_REJECTED, not retryable, naming the function and digest, and
  the task fails CALL_FAILED (fast fail) with that message.

Approved digests come from an AuditAllowlist: the file AUDIT_ALLOWLIST_FILE, one
approval a line, `<sha256 hex digest> [approval id]`, `#` starts a comment. The
Worker's 500 ms tick calls `refresh()`: the file is re-read when its mtime or
size changed, so an approval added at run time holds for the next dispatch (a
task already refused stays refused). A file that cannot be read on refresh keeps
the previous list (logged); at start it is a configuration error.

Or (also) from etcd, where function code comes from etcd: the keys under
AUDIT_ALLOWLIST_ETCD_PREFIX (e.g. `/blockx/audit/`), `<prefix><digest>` = approval
id, fetched at start and again by every tick (EtcdAuditAllowlist). A failed fetch
keeps the previous list: enforce fails closed while etcd is out of reach at start.

An approved call's ExecuteCall carries the approval id in its optional `audit`
field, so the executor can log what it ran. The check is one dict lookup per
dispatch, and nothing at all in `off`."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger("blockx.audit")

AUDIT_MODES = ("off", "warn", "enforce")
AUDIT_REJECTED = "AUDIT_REJECTED"


class AuditAllowlistError(ValueError):
    pass


def audit_problems(mode: str, allowlist_file: str, etcd_prefix: str, etcd_enabled: bool,
                   name: Callable[[str], str]) -> list[str]:
    """The rules of auditMode, auditAllowlistFile and auditAllowlistEtcdPrefix
    (`name` words each setting for the operator): a known mode, an allowlist for
    warn and enforce, a prefix that is an etcd key directory, a file that parses."""
    out: list[str] = []
    if mode not in AUDIT_MODES:
        out.append(f"{name('auditMode')} must be one of off, warn, enforce (got {mode!r})")
    elif mode != "off" and not (allowlist_file or etcd_prefix):
        out.append(f"{name('auditMode')} is {mode!r} but {name('auditAllowlistFile')} is empty: "
                   f"name the file of approved code digests (or set {name('auditAllowlistEtcdPrefix')})")
    if etcd_prefix and (not etcd_prefix.startswith("/") or not etcd_prefix.endswith("/")):
        out.append(f"{name('auditAllowlistEtcdPrefix')} {etcd_prefix!r} must start and end with '/' "
                   "(e.g. \"/blockx/audit/\")")
    elif etcd_prefix and not etcd_enabled:
        out.append(f"{name('auditAllowlistEtcdPrefix')} needs etcd: {name('etcdEndpoints')} is \"none\"")
    if allowlist_file:
        try:
            AuditAllowlist(allowlist_file)
        except AuditAllowlistError as exc:
            out.append(f"{name('auditAllowlistFile')}: {exc}")
    return out


def parse_allowlist(text: str, source: str) -> dict[str, str]:
    approved: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        digest, _, approval = line.partition(" ")
        digest = digest.lower().removeprefix("sha256:")
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise AuditAllowlistError(f"{source} line {n}: {raw.strip()!r} does not start with a sha256 hex digest")
        approved[digest] = approval.strip() or digest[:12]
    return approved


class AuditAllowlist:
    """Approved digest -> approval id, from a file, re-read when it changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self.approved: dict[str, str] = {}
        self.refresh(strict=True)

    def refresh(self, strict: bool = False) -> bool:
        """True when the list changed."""
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return False
            with open(self.path, encoding="utf-8") as f:
                approved = parse_allowlist(f.read(), self.path)
        except (OSError, AuditAllowlistError, UnicodeDecodeError) as exc:
            if strict:
                raise AuditAllowlistError(f"audit allowlist {self.path!r}: {exc}") from None
            log.error("audit_allowlist_unreadable", extra={"event": "audit_allowlist_unreadable", "fields": {
                "path": self.path, "error": str(exc), "kept": len(self.approved)}})
            return False
        self._stamp, self.approved = stamp, approved
        log.info("audit_allowlist_loaded", extra={"event": "audit_allowlist_loaded", "fields": {
            "path": self.path, "approved": len(approved)}})
        return True


class EtcdAuditAllowlist:
    """Approved digest -> approval id, from the keys under an etcd prefix."""

    def __init__(self, client, prefix: str) -> None:
        self.client = client            # an aetcd.Client made by blockx.etcd.connection.EtcdConnection
        self.prefix = prefix.encode()
        self.approved: dict[str, str] = {}
        self._task: asyncio.Task[bool] | None = None
        self._failing = False

    async def fetch(self) -> bool:
        """One read of the prefix; True when it succeeded."""
        try:
            got = await self.client.get_prefix(self.prefix)
        except Exception as exc:  # noqa: BLE001 - etcd away: keep what we have
            # The client keeps its channel and the auth token it got when it
            # connected; an etcd that restarted (or had its auth reset) no longer
            # knows that token and refuses every later read with it. Closing the
            # client makes the next fetch connect and authenticate again.
            await self._drop_connection()
            if not self._failing:
                log.error("audit_allowlist_unreadable", extra={"event": "audit_allowlist_unreadable", "fields": {
                    "prefix": self.prefix.decode(), "error": f"{type(exc).__name__}: {exc}",
                    "kept": len(self.approved)}})
            self._failing = True
            return False
        approved = {}
        for kv in got:
            digest = kv.key[len(self.prefix):].decode(errors="replace").lower().removeprefix("sha256:")
            approved[digest] = kv.value.decode(errors="replace").strip() or digest[:12]
        if approved != self.approved or self._failing:
            log.info("audit_allowlist_loaded", extra={"event": "audit_allowlist_loaded", "fields": {
                "prefix": self.prefix.decode(), "approved": len(approved)}})
        self.approved, self._failing = approved, False
        return True

    async def _drop_connection(self) -> None:
        try:
            await self.client.close()
        except Exception:  # noqa: BLE001 - the channel is abandoned either way
            pass

    def refresh(self) -> None:
        import asyncio

        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.fetch())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await self.client.close()


class AuditGate:
    __slots__ = ("mode", "allowlist", "etcd", "metrics", "_warned")

    def __init__(self, mode: str, allowlist: AuditAllowlist | None, metrics=None,
                 etcd: EtcdAuditAllowlist | None = None) -> None:
        if mode not in AUDIT_MODES:
            raise ValueError(f"audit mode must be one of {', '.join(AUDIT_MODES)}, got {mode!r}")
        self.mode = mode
        self.allowlist = allowlist
        self.etcd = etcd
        self.metrics = metrics
        self._warned: set[str] = set()

    @property
    def active(self) -> bool:
        return self.mode != "off"

    def refresh(self) -> None:
        if self.allowlist is not None:
            self.allowlist.refresh()
        if self.etcd is not None:
            self.etcd.refresh()

    def check(self, function_id: str, digest: str) -> tuple[str | None, str]:
        """(approval id or None, rejection message or ""): a non-empty message means
        the call must not be dispatched."""
        key = digest.lower().removeprefix("sha256:")
        approval = self.allowlist.approved.get(key) if self.allowlist is not None else None
        if approval is None and self.etcd is not None:
            approval = self.etcd.approved.get(key)
        if approval is not None:
            return approval, ""
        if self.mode == "enforce":
            if self.metrics is not None:
                self.metrics.audit_rejections += 1
            return None, (f"function {function_id!r} code digest {digest} is not approved "
                          "(AUDIT_MODE=enforce): add it to the audit allowlist to run it")
        if digest not in self._warned:
            self._warned.add(digest)
            log.warning("audit_unapproved", extra={"event": "audit_unapproved", "fields": {
                "function_id": function_id, "digest": digest, "mode": self.mode}})
        return None, ""
