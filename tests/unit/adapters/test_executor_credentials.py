"""ExecutorCredentials: one secret per spawn, accepted once, constant-time compared."""
from blockx.adapters.executor.credentials import ExecutorCredentials


def test_a_secret_attaches_once_and_only_for_its_id():
    creds = ExecutorCredentials()
    s0 = creds.issue("exec-0")
    s1 = creds.issue("exec-1")
    assert len(s0) == 64 and s0 != s1
    assert "wrong attachSecret" in creds.check("exec-0", s1)
    assert creds.check("exec-0", s0) is None
    assert "unknown id, or its secret was used" in creds.check("exec-0", s0)      # spent
    assert creds.check("exec-1", s1) is None


def test_missing_unknown_and_reissued_secrets_are_refused():
    creds = ExecutorCredentials()
    old = creds.issue("exec-0")
    new = creds.issue("exec-0")                 # a respawn: the old secret is void
    assert "without an attachSecret" in creds.check("exec-0", None)
    assert "without an attachSecret" in creds.check("exec-0", "")
    assert "without an attachSecret" in creds.check("exec-0", 12345)
    assert "wrong attachSecret" in creds.check("exec-0", old)
    assert "unknown id" in creds.check("exec-9", new)
    assert "wrong attachSecret" in creds.check("exec-0", "\udcff" * 64)   # not even encodable: refused, no error
    creds.revoke("exec-0")
    assert "unknown id" in creds.check("exec-0", new)


def test_refusals_never_contain_the_secret():
    creds = ExecutorCredentials()
    secret = creds.issue("exec-0")
    wrong = secret[:-1] + ("1" if secret[-1] == "0" else "0")
    for presented in (wrong, "", None):
        assert secret not in creds.check("exec-0", presented)
