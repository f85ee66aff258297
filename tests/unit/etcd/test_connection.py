"""EtcdConnection built from the Worker's config and from the CLI: one set of
settings, the same names, checked once; the password is never printed."""
import json

import pytest

from blockx.app.config import load_config
from blockx.app.profile import BLOCK
from blockx.cli import build_parser
from blockx.cli.exit import CLIError
from blockx.cli.fleet import etcd_connection
from blockx.etcd.connection import EtcdConnection


def test_the_worker_config_makes_the_connection_every_worker_client_gets(tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("from-file\n")
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    cfg = load_config(BLOCK, env={"ETCD_ENDPOINTS": "10.0.0.1:2379,10.0.0.2:2379", "ETCD_CA_CERT": str(ca),
                                  "ETCD_SERVER_NAME": "etcd.internal", "ETCD_USER": "worker",
                                  "ETCD_PASSWORD_FILE": str(pw)})
    conn = EtcdConnection.from_config(cfg)
    assert conn.targets == ["10.0.0.1:2379", "10.0.0.2:2379"]
    assert (conn.tls.ca, conn.server_name, conn.user, conn.password) == (str(ca), "etcd.internal", "worker",
                                                                         "from-file")
    assert not [v for v in cfg.violations(BLOCK) if "etcd" in v.lower()]
    disabled = load_config(BLOCK, env={"ETCD_ENDPOINTS": "none"})
    assert EtcdConnection.from_config(disabled).endpoints == ()


def test_the_password_is_never_printed_and_bad_pairs_are_violations(tmp_path):
    cfg = load_config(BLOCK, env={"ETCD_USER": "worker", "ETCD_PASSWORD": "hunter2"})
    assert "hunter2" not in json.dumps(cfg.to_dict())
    assert cfg.to_dict()["etcdPassword"] == "***"
    vs = load_config(BLOCK, env={"ETCD_USER": "worker"}).violations(BLOCK)
    assert any("etcdUser (ETCD_USER) and etcdPassword" in v for v in vs), vs
    vs = load_config(BLOCK, env={"ETCD_USER": "w", "ETCD_PASSWORD": "a",
                                 "ETCD_PASSWORD_FILE": str(tmp_path / "nope")}).violations(BLOCK)
    assert any("both set" in v for v in vs) and any("etcdPasswordFile" in v and "readable" in v for v in vs), vs
    vs = load_config(BLOCK, env={"ETCD_SERVER_NAME": "etcd.internal"}).violations(BLOCK)
    assert any("etcdServerName (ETCD_SERVER_NAME) is a TLS setting" in v for v in vs), vs


def test_cli_flags_override_the_same_environment_variables(tmp_path, monkeypatch):
    pw = tmp_path / "pw"
    pw.write_text("p2\n")
    monkeypatch.setenv("ETCD_CA_CERT", "/env/ca.pem")
    monkeypatch.setenv("ETCD_USER", "env-user")
    monkeypatch.setenv("ETCD_PASSWORD", "env-pass")
    ns = build_parser().parse_args(["workers", "--etcd", "h:1"])
    c = etcd_connection(ns)
    assert (c.targets, c.tls.ca, c.user, c.password) == (["h:1"], "/env/ca.pem", "env-user", "env-pass")
    ns = build_parser().parse_args(["functions", "list", "--etcd", "h:1", "--etcd-ca", "/flag/ca.pem",
                                    "--etcd-user", "flag-user", "--etcd-password-file", str(pw)])
    c = etcd_connection(ns)
    assert (c.tls.ca, c.user, c.password) == ("/flag/ca.pem", "flag-user", "p2")
    monkeypatch.delenv("ETCD_PASSWORD")
    ns = build_parser().parse_args(["status", "--etcd", "h:1", "--etcd-user", "u"])
    with pytest.raises(CLIError, match="etcd user needs its password .* --etcd-"):
        etcd_connection(ns)
