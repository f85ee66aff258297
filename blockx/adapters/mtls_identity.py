"""The identity of an mTLS client, from its certificate's subject and subject
alternative names as grpc's TLS peer reports them (WORKER_AUTH_MODE=mtls).

Rules:
- A subject with exactly one common name (CN): the identity is the whole subject
  as grpc prints it (RFC 2253, the most specific attribute first, e.g.
  ``CN=alice,O=acme``), so ``CN=admin,O=tenant-42`` and ``CN=admin`` are two
  identities.
- A subject with two or more CNs (``CN=alice,CN=admin``, ``CN=alice+CN=admin``)
  is refused: which one names the client is ambiguous, and grpc's own
  common-name property reports just one of them.
- A subject without a CN: the identity is the certificate's one subject
  alternative name, written ``URI:<uri>``, ``DNS:<name>``, ``email:<address>``
  or ``IP:<address>``; with several, its SPIFFE id when it has exactly one;
  otherwise refused.
- Admin is never read from a name: only the identities listed in
  authMtlsAdmins (WORKER_AUTH_MTLS_ADMINS) are admin (``admin_identities``).

A refused certificate is UNAUTHENTICATED with a message saying what it must hold."""
from __future__ import annotations

from collections.abc import Iterable

_CN_TYPES = frozenset({"CN", "COMMONNAME", "2.5.4.3", "OID.2.5.4.3"})
# grpc's auth-context keys for the SANs of each kind, and how an identity writes the kind.
SAN_KINDS = (("peer_uri", "URI"), ("peer_dns", "DNS"), ("peer_email", "email"), ("peer_ip", "IP"))
ADMINS_SEPARATOR = ";"        # subjects hold commas: authMtlsAdmins separates identities with ';'


class IdentityRefused(ValueError):
    """The certificate does not name exactly one identity."""


def attribute_types(subject: str) -> list[str]:
    """The attribute types of an RFC 2253 subject, in order (``CN=a+CN=b,O=c`` ->
    CN, CN, O). A backslash escapes the next character (``\\,`` is part of a value,
    never a separator); a quoted value is skipped whole."""
    types: list[str] = []
    cur: list[str] = []
    in_type = True
    i, n = 0, len(subject)
    while i < n:
        c = subject[i]
        if c == "\\":
            if in_type:
                cur.append(subject[i:i + 2])
            i += 2
            continue
        if in_type:
            if c == "=":
                types.append("".join(cur).strip().upper())
                cur = []
                in_type = False
            elif c in ",+":
                cur = []                      # an attribute without '=': not a type, skip it
            else:
                cur.append(c)
        elif c == '"':
            i += 1
            while i < n and subject[i] != '"':
                i += 2 if subject[i] == "\\" else 1
        elif c in ",+;":
            in_type = True
        i += 1
    return types


def peer_identity(subject: str, sans: Iterable[tuple[str, str]], spiffe_ids: Iterable[str] = ()) -> str:
    """The identity of a client certificate (the rules above); raises IdentityRefused."""
    cns = sum(1 for t in attribute_types(subject) if t in _CN_TYPES)
    if cns == 1:
        return subject
    if cns > 1:
        raise IdentityRefused(
            f"the client certificate's subject {subject[:200]!r} has {cns} common names: an mTLS identity is "
            "one CN (or, without a CN, one subject alternative name); issue the client a certificate with "
            "exactly one CN")
    names = [f"{kind}:{value}" for kind, value in sans]
    if len(names) == 1:
        return names[0]
    spiffe = list(dict.fromkeys(spiffe_ids))
    if len(names) > 1 and len(spiffe) == 1:
        return f"URI:{spiffe[0]}"
    what = (f"{len(names)} subject alternative names ({', '.join(n[:80] for n in names[:4])})" if names
            else "no subject alternative name")
    raise IdentityRefused(
        f"the client certificate's subject {subject[:200]!r} has no common name and {what}: an mTLS "
        "identity is one CN, or, without a CN, one subject alternative name (or exactly one SPIFFE id)")


def admin_identities(text: str) -> frozenset[str]:
    """authMtlsAdmins: identities separated by ';' (``CN=ops,O=acme;URI:spiffe://acme/ops``)."""
    return frozenset(p.strip() for p in text.split(ADMINS_SEPARATOR) if p.strip())


__all__ = ["ADMINS_SEPARATOR", "IdentityRefused", "SAN_KINDS", "admin_identities", "attribute_types",
           "peer_identity"]
