"""AuditGate (spec: OrchestratorDeps.AuditGate): may this code run?

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

An approved call's ExecuteCall carries the approval id in its optional `audit`
field, so the executor can log what it ran. The check is one dict lookup per
dispatch, and nothing at all in `off`."""

from __future__ import annotations

import logging
import os

log = logging.getLogger("blockx.audit")

AUDIT_MODES = ("off", "warn", "enforce")
AUDIT_REJECTED = "AUDIT_REJECTED"


class AuditAllowlistError(ValueError):
    pass


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


class AuditGate:
    __slots__ = ("mode", "allowlist", "metrics", "_warned")

    def __init__(self, mode: str, allowlist: AuditAllowlist | None, metrics=None) -> None:
        if mode not in AUDIT_MODES:
            raise ValueError(f"audit mode must be one of {', '.join(AUDIT_MODES)}, got {mode!r}")
        self.mode = mode
        self.allowlist = allowlist
        self.metrics = metrics
        self._warned: set[str] = set()

    @property
    def active(self) -> bool:
        return self.mode != "off"

    def refresh(self) -> None:
        if self.allowlist is not None:
            self.allowlist.refresh()

    def check(self, function_id: str, digest: str) -> tuple[str | None, str]:
        """(approval id or None, rejection message or ""): a non-empty message means
        the call must not be dispatched."""
        approved = self.allowlist.approved if self.allowlist is not None else {}
        approval = approved.get(digest.lower().removeprefix("sha256:"))
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
