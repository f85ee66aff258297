"""Authenticator: who calls the Worker's API (WORKER_AUTH_MODE).

- ``token`` (the default): the ``authorization`` metadata of the call holds
  ``Bearer <token>``, a token of the TokenStore (blockx.adapters.auth_tokens);
  the identity is the token's name.
- ``mtls``: the port speaks mutual TLS (a client CA is configured, so a client
  without a certificate it signed never completes the handshake); the identity
  comes from the client certificate: its subject when it has exactly one common
  name, else its one subject alternative name (blockx.adapters.mtls_identity).
  An identity is admin only when authMtlsAdmins names it: never by its CN.
- ``none``: no authentication; every caller is the unrestricted caller.

Handlers resolve the caller once per RPC or stream, at entry (``caller``), and
hand it to the core, which owns the ownership rule (blockx.core.owners). The
check reads only the call's metadata or its TLS peer: no IO. Missing or wrong
credentials raise ``Unauthenticated``, answered UNAUTHENTICATED with its message.
The grpc.health.v1 service is never checked (probes carry no credentials);
reflection is (``GuardedReflection``)."""
from __future__ import annotations

import logging
from collections.abc import Callable

import grpc
from grpc_reflection.v1alpha import reflection

from blockx.adapters.auth_tokens import TokenFileError, TokenStore, local_token_problem, read_tokens
from blockx.adapters.mtls_identity import SAN_KINDS as _SAN_KINDS, IdentityRefused, peer_identity
from blockx.credentials import is_local_address
from blockx.core.owners import Caller

log = logging.getLogger("blockx.auth")

MODES = ("token", "mtls", "none")
_BEARER = "Bearer "


def auth_problems(mode: str, tokens_file: str, state_dir: str, *, tls_cert: str, tls_client_ca: str,
                  name: Callable[[str], str]) -> list[str]:
    """The rules of authMode and authTokensFile (`name` words each setting for the
    operator): a known mode; mtls needs a client CA (the subject of a certificate
    it signed is the identity); a tokens file must parse, and without one the
    generated local token must be usable."""
    out: list[str] = []
    if mode not in MODES:
        out.append(f"{name('authMode')} must be one of {', '.join(MODES)} (got {mode!r})")
    elif mode == "mtls" and not (tls_cert and tls_client_ca):
        out.append(f"{name('authMode')} is mtls but {name('tlsClientCa')} is not set: the identity is the "
                   f"subject of a client certificate, so set {name('tlsCert')}, {name('tlsKey')} and "
                   f"{name('tlsClientCa')} (the CA that signs the clients' certificates)")
    if tokens_file and mode == "token":
        try:
            read_tokens(tokens_file)
        except TokenFileError as exc:
            out.append(f"{name('authTokensFile')}: {exc}")
    elif mode == "token" and (problem := local_token_problem(state_dir)):
        out.append(f"{name('authMode')} is token without {name('authTokensFile')}: {problem}")
    return out


class Unauthenticated(Exception):
    """The call carries no credentials, or credentials this Worker does not accept."""


class Authenticator:
    __slots__ = ("mode", "tokens", "mtls_admins", "_mtls_callers")

    def __init__(self, mode: str, tokens: TokenStore | None = None, *,
                 mtls_admins: frozenset[str] = frozenset()) -> None:
        if mode not in MODES:
            raise ValueError(f"auth mode {mode!r} is not one of {', '.join(MODES)}")
        if mode == "token" and tokens is None:
            raise ValueError("token auth needs a TokenStore")
        self.mode = mode
        self.tokens = tokens
        self.mtls_admins = mtls_admins        # mtls: the identities that are admin (authMtlsAdmins)
        self._mtls_callers: dict[tuple, Caller] = {}

    @property
    def required(self) -> bool:
        return self.mode != "none"

    def caller(self, context) -> Caller | None:
        """The identity of the call (None: no authentication); raises Unauthenticated."""
        mode = self.mode
        if mode == "token":
            return self.caller_from_metadata(context.invocation_metadata())
        if mode == "mtls":
            return self._peer_caller(context)
        return None

    def caller_from_metadata(self, metadata) -> Caller:
        """Token mode: the identity of the bearer token in ``metadata``; raises Unauthenticated.
        Reads the metadata only, so the call gate (blockx.adapters.grpc.call_gate) can run it
        before the request is received."""
        for key, value in metadata or ():
            if key == "authorization":
                break
        else:
            raise Unauthenticated(
                "this worker requires a bearer token (WORKER_AUTH_MODE=token): send the metadata "
                "`authorization: Bearer <token>`; the blockx CLI takes --token or $BLOCKX_TOKEN, and "
                "on the worker's host finds <STATE_DIR>/auth-token by itself")
        if type(value) is bytes:
            value = value.decode("latin-1")
        if not value.startswith(_BEARER):
            raise Unauthenticated("the authorization metadata must be `Bearer <token>`")
        assert self.tokens is not None     # __init__ refuses token mode without a TokenStore
        caller = self.tokens.identify(value[7:].strip())
        if caller is None:
            raise Unauthenticated(
                "the bearer token is not one this worker accepts: check --token / $BLOCKX_TOKEN "
                "against the worker's tokens file (WORKER_AUTH_TOKENS_FILE, or <STATE_DIR>/auth-token)")
        return caller

    def _peer_caller(self, context) -> Caller:
        auth = context.auth_context() or {}
        subject = (auth.get("x509_subject") or [b""])[0]
        sans = tuple((kind, v) for key, kind in _SAN_KINDS for v in auth.get(key) or ())
        key = (subject, sans)
        caller = self._mtls_callers.get(key)
        if caller is None:
            if not subject and not sans:
                raise Unauthenticated("this worker requires a client certificate (WORKER_AUTH_MODE=mtls): "
                                      "connect with --tls-cert / --tls-key signed by its WORKER_TLS_CLIENT_CA")
            try:
                name = peer_identity(subject.decode("utf-8", "replace"),
                                     [(kind, v.decode("utf-8", "replace")) for kind, v in sans],
                                     [v.decode("utf-8", "replace") for v in auth.get("peer_spiffe_id") or ()])
            except IdentityRefused as exc:
                raise Unauthenticated(str(exc)) from None
            caller = Caller(name, admin=name in self.mtls_admins)
            if len(self._mtls_callers) < 10_000:
                self._mtls_callers[key] = caller
        return caller


def warn_if_open(mode: str, listen_addr: str, tls_on: bool) -> bool:
    """WORKER_AUTH_MODE=none on a non-loopback listener without TLS: log a warning
    (anyone who reaches the port runs tasks and reads every result). True if warned."""
    if mode != "none" or tls_on or is_local_address(listen_addr):
        return False
    log.warning("auth_disabled", extra={"event": "auth_disabled", "fields": {
        "listen": listen_addr,
        "warning": "WORKER_AUTH_MODE=none on a non-loopback listener without TLS: anyone who can reach "
                   "this port can submit tasks and read every task's result; use WORKER_AUTH_MODE=token "
                   "(the default) or mtls, or listen on 127.0.0.1"}})
    return True


def warn_if_cleartext_tokens(mode: str, listen_addr: str, tls_on: bool) -> bool:
    """WORKER_AUTH_MODE=token on a non-loopback listener without TLS: log a warning
    (every bearer token crosses the network readable, and whoever reads one on the
    way is that identity, admin included). True if warned."""
    if mode != "token" or tls_on or is_local_address(listen_addr):
        return False
    log.warning("auth_token_cleartext", extra={"event": "auth_token_cleartext", "fields": {
        "listen": listen_addr,
        "warning": "bearer tokens reach this non-loopback listener without TLS: anyone on the network path "
                   "can read a token and use it; set WORKER_TLS_CERT and WORKER_TLS_KEY, or listen on "
                   "127.0.0.1"}})
    return True


class GuardedReflection(reflection.aio.ReflectionServicer):
    """Server reflection behind the auth mode: a caller without credentials learns
    nothing of the services (health stays open for probes)."""

    def __init__(self, service_names, auth: Authenticator) -> None:
        super().__init__(service_names)
        self._auth = auth

    async def ServerReflectionInfo(self, request_iterator, context):
        try:
            self._auth.caller(context)
        except Unauthenticated as exc:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
        async for resp in super().ServerReflectionInfo(request_iterator, context):
            yield resp


__all__ = ["Authenticator", "GuardedReflection", "MODES", "Unauthenticated",
           "warn_if_cleartext_tokens", "warn_if_open"]
