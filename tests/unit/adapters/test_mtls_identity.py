"""The mTLS identity rules (blockx.adapters.mtls_identity): one CN or one SAN,
escapes that never split a value, and admin only by the mapping."""
import pytest

from blockx.adapters.mtls_identity import IdentityRefused, admin_identities, attribute_types, peer_identity


@pytest.mark.parametrize("subject, types", [
    ("CN=alice", ["CN"]),
    ("CN=admin,O=tenant-42", ["CN", "O"]),
    ("CN=alice,CN=admin", ["CN", "CN"]),
    ("CN=alice+CN=admin", ["CN", "CN"]),
    ("CN=bob\\,CN=admin", ["CN"]),                 # an escaped comma is part of the value
    ("CN=bob\\2CCN=admin", ["CN"]),                # a hex escape too
    ('CN="a,CN=b",O=x', ["CN", "O"]),              # a quoted value is skipped whole
    ("O=acme", ["O"]),
    ("", []),
])
def test_attribute_types(subject, types):
    assert attribute_types(subject) == types


def test_one_cn_is_the_subject_and_two_are_refused():
    assert peer_identity("CN=alice", []) == "CN=alice"
    assert peer_identity("CN=admin,O=tenant-42", []) == "CN=admin,O=tenant-42"    # not "admin"
    for subject in ("CN=alice,CN=admin", "CN=alice+CN=admin"):
        with pytest.raises(IdentityRefused, match="has 2 common names"):
            peer_identity(subject, [("DNS", "alice.acme")])                    # a SAN does not rescue it


def test_without_a_cn_one_san_or_one_spiffe_id():
    assert peer_identity("O=acme", [("URI", "spiffe://acme/ops")]) == "URI:spiffe://acme/ops"
    assert peer_identity("", [("DNS", "ops.acme")]) == "DNS:ops.acme"
    assert peer_identity("O=acme", [("URI", "spiffe://acme/ops"), ("DNS", "ops.acme")],
                         ["spiffe://acme/ops"]) == "URI:spiffe://acme/ops"
    with pytest.raises(IdentityRefused, match="2 subject alternative names"):
        peer_identity("O=acme", [("DNS", "a.acme"), ("DNS", "b.acme")])
    with pytest.raises(IdentityRefused, match="no subject alternative name"):
        peer_identity("O=acme", [])


def test_admins_are_listed_identities_separated_by_semicolons():
    assert admin_identities("") == frozenset()
    assert admin_identities(" CN=ops,O=acme ; URI:spiffe://acme/ops;") == {"CN=ops,O=acme", "URI:spiffe://acme/ops"}
