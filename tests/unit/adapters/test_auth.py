"""The auth mode's start-up rules: which listeners count as loopback, when
`none` warns, and what an Authenticator needs."""
import logging

import pytest

from blockx.adapters.auth import Authenticator, warn_if_cleartext_tokens, warn_if_open
from blockx.credentials import is_local_address as is_loopback_listener


@pytest.mark.parametrize("addr, loopback", [
    ("127.0.0.1:8081", True), ("127.0.0.2:1", True), ("[::1]:8081", True), ("localhost:8081", True),
    ("[::]:8081", False), ("0.0.0.0:8081", False), ("10.0.0.5:8081", False), ("worker-1:8081", False),
])
def test_loopback_listeners(addr, loopback):
    assert is_loopback_listener(addr) is loopback


def test_none_warns_only_when_open(caplog):
    with caplog.at_level(logging.WARNING, logger="blockx.auth"):
        assert warn_if_open("none", "[::]:8081", tls_on=False)
        assert not warn_if_open("none", "127.0.0.1:8081", tls_on=False)
        assert not warn_if_open("none", "[::]:8081", tls_on=True)
        assert not warn_if_open("token", "[::]:8081", tls_on=False)
    warned = [r for r in caplog.records if getattr(r, "event", "") == "auth_disabled"]
    assert len(warned) == 1 and "[::]:8081" in str(warned[0].fields)


def test_tokens_on_an_open_listener_without_tls_warn(caplog):
    with caplog.at_level(logging.WARNING, logger="blockx.auth"):
        assert warn_if_cleartext_tokens("token", "[::]:8081", tls_on=False)
        assert not warn_if_cleartext_tokens("token", "127.0.0.1:8081", tls_on=False)
        assert not warn_if_cleartext_tokens("token", "[::]:8081", tls_on=True)
        assert not warn_if_cleartext_tokens("mtls", "[::]:8081", tls_on=True)
        assert not warn_if_cleartext_tokens("none", "[::]:8081", tls_on=False)
    warned = [r for r in caplog.records if getattr(r, "event", "") == "auth_token_cleartext"]
    assert len(warned) == 1 and "WORKER_TLS_CERT" in str(warned[0].fields)


def test_an_authenticator_needs_a_known_mode_and_tokens_for_token_mode():
    with pytest.raises(ValueError, match="not one of token, mtls, none"):
        Authenticator("open")
    with pytest.raises(ValueError, match="TokenStore"):
        Authenticator("token")
    assert not Authenticator("none").required and Authenticator("mtls").required
