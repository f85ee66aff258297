"""`blockx dashboard`'s command line: the options' help, and the mistakes it refuses
before it serves ("error: ..." with what to do, exit 1)."""
from __future__ import annotations

import pytest

from blockx.cli import main
from blockx.cli.parser import build_parser


def _dashboard_parser():
    p = build_parser()
    sub = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices["dashboard"]


def test_every_option_is_explained():
    d = _dashboard_parser()
    for a in d._actions:
        if a.option_strings and a.dest != "help":
            assert a.help and len(a.help) > 10, a.option_strings
    text = d.format_help()
    for opt in ("--listen", "--workers", "--etcd", "--tls-cert", "--worker-ca", "--allowed-host", "--max-sessions",
                "--session-idle", "--session-max-age"):
        assert opt in text
    assert "127.0.0.1:8088" in text


@pytest.mark.parametrize("argv, words", [
    (["dashboard"], "--workers ADDR"),
    (["dashboard", "--workers", "127.0.0.1:1", "--tls-cert", "c.pem"], "--tls-cert and --tls-key"),
    (["dashboard", "--workers", "127.0.0.1:1", "--session-idle", "0"], "must be positive"),
    (["dashboard", "--workers", "127.0.0.1:1", "--listen", "nowhere"], "--listen"),
    (["dashboard", "--workers", "127.0.0.1:1", "--tls-cert", "/no/such.pem", "--tls-key", "/no/such.key"],
     "/no/such.pem"),
])
def test_mistakes_are_refused_before_serving(argv, words, capsys):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 1 and words in err, err       # CLIError: "error: ...", exit 1 (blockx.cli.exit)
