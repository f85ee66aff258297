"""AuditGate and its allowlist file."""
import logging
import os

import pytest

from blockx.adapters.audit import AuditAllowlist, AuditAllowlistError, AuditGate, parse_allowlist

D1, D2 = "a" * 64, "b" * 64


class M:
    audit_rejections = 0


def test_parse_allowlist_lines_comments_and_bad_digests():
    assert parse_allowlist(f"# x\n\n{D1} CR-1  # why\nsha256:{D2.upper()}\n", "f") == {D1: "CR-1", D2: D2[:12]}
    with pytest.raises(AuditAllowlistError, match="f line 2: 'nope' does not start with a sha256 hex digest"):
        parse_allowlist(f"{D1}\nnope\n", "f")


def test_enforce_refuses_unapproved_and_counts(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text(f"{D1} CR-1\n")
    m = M()
    gate = AuditGate("enforce", AuditAllowlist(str(f)), m)
    assert gate.check("add", D1) == ("CR-1", "")
    approval, refused = gate.check("sq", D2)
    assert approval is None and f"function 'sq' code digest {D2} is not approved" in refused
    assert m.audit_rejections == 1


def test_warn_logs_once_per_digest(tmp_path, caplog):
    f = tmp_path / "a.txt"
    f.write_text("")
    gate = AuditGate("warn", AuditAllowlist(str(f)))
    with caplog.at_level(logging.WARNING, logger="blockx.audit"):
        assert gate.check("sq", D2) == (None, "")
        assert gate.check("sq", D2) == (None, "")
    assert [r.event for r in caplog.records] == ["audit_unapproved"]


def test_refresh_picks_up_changes_and_keeps_the_list_when_the_file_breaks(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text(f"{D1}\n")
    al = AuditAllowlist(str(f))
    assert al.refresh() is False                     # unchanged
    f.write_text(f"{D1}\n{D2} CR-2\n")
    os.utime(f, ns=(1, 1))
    assert al.refresh() is True and al.approved[D2] == "CR-2"
    f.write_text("garbage\n")
    assert al.refresh() is False and D2 in al.approved
    f.unlink()
    assert al.refresh() is False and D2 in al.approved
    with pytest.raises(AuditAllowlistError, match="cannot|No such file"):
        AuditAllowlist(str(f))
