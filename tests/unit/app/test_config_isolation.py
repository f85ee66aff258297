"""Config rules of the isolation and trust settings."""
from blockx.app.config import load_config
from blockx.app.profile import BLOCK


def load(env):
    return load_config(BLOCK, env={"ETCD_ENDPOINTS": "none", **env})


def test_tls_files_go_in_pairs_and_must_exist(tmp_path):
    pem = tmp_path / "x.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n")
    problems = load({"WORKER_TLS_CERT": str(pem), "ETCD_KEY": str(pem),
                     "SHADOW_TLS_CERT": str(tmp_path / "missing.pem"), "SHADOW_TLS_KEY": str(pem)}).violations()
    assert "tlsCert (WORKER_TLS_CERT) and tlsKey (WORKER_TLS_KEY) must be set together" in problems
    assert "etcdCert (ETCD_CERT) and etcdKey (ETCD_KEY) must be set together" in problems
    assert any(p.startswith("shadowTlsCert (SHADOW_TLS_CERT)") and "is not a readable file" in p for p in problems)
    problems = load({"WORKER_TLS_CLIENT_CA": str(pem)}).violations()
    assert any("tlsClientCa (WORKER_TLS_CLIENT_CA) needs tlsCert" in p for p in problems), problems
    assert load({"WORKER_TLS_CERT": str(pem), "WORKER_TLS_KEY": str(pem),
                 "WORKER_TLS_CLIENT_CA": str(pem)}).violations() == []


def test_an_https_etcd_endpoint_points_at_the_tls_settings():
    problems = load({"ETCD_ENDPOINTS": "https://etcd:2379"}).violations()
    assert any("TLS towards etcd is turned on by etcdCaCert (ETCD_CA_CERT)" in p for p in problems), problems


def test_budget_preemption_is_on_by_default_and_can_be_turned_off():
    from blockx.app.run import executor_args

    assert executor_args(load({})) == ["--budget-preempt-ms", "50"]
    assert executor_args(load({"EXECUTOR_BUDGET_PREEMPT_MS": "0"})) == []
    assert any("executorBudgetPreemptMs" in p for p in load({"EXECUTOR_BUDGET_PREEMPT_MS": "-1"}).violations())


def test_sandbox_mode_without_bwrap_stops_the_worker_at_start(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    problems = load({"EXECUTOR_SPAWN_MODE": "sandbox"}).violations()
    assert any('"sandbox" needs bubblewrap, and `bwrap` is not installed' in p for p in problems), problems


def test_sandbox_mode_where_namespaces_are_refused_stops_the_worker_at_start(monkeypatch, tmp_path):
    # A bwrap that fails the way it does when user namespaces are refused.
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    problems = load({"EXECUTOR_SPAWN_MODE": "sandbox"}).violations()
    assert any("bubblewrap cannot create the executor's namespaces here (bwrap: No permissions to create "
               "new namespace); user namespaces are probably refused" in p for p in problems), problems


OCI = {"EXECUTOR_SPAWN_MODE": "sandbox", "EXECUTOR_SANDBOX_RUNTIME": "oci"}


def test_oci_runtime_without_runc_stops_the_worker_at_start(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    problems = load(OCI).violations()
    assert any('executorSandboxRuntime (EXECUTOR_SANDBOX_RUNTIME) "oci" needs `runc`, and it is not on PATH: '
               "install the Debian package `runc` (`make runc`)" in p for p in problems), problems


def test_oci_runtime_needs_a_root_worker(monkeypatch, tmp_path):
    fake = tmp_path / "runc"
    fake.write_text("#!/bin/sh\necho 'runc version 1.1.5'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    problems = load(OCI).violations()
    assert any('"oci": runc needs the Worker to run as root' in p for p in problems), problems


def test_oci_runtime_needs_the_memory_and_pids_controllers(monkeypatch, tmp_path):
    from blockx.adapters.executor import oci

    fake = tmp_path / "bin" / "runc"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'runc version 1.1.5'\n")
    fake.chmod(0o755)
    cgroups = tmp_path / "cgroup"
    (cgroups / "cpu").mkdir(parents=True)
    monkeypatch.setenv("PATH", str(fake.parent))
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr(oci, "CGROUP_ROOT", cgroups)
    problems = load(OCI).violations()
    assert any("the cgroup controllers memory, pids are not available under" in p for p in problems), problems


def test_auth_mode_defaults_to_token_and_is_checked(tmp_path):
    assert load({}).auth_mode == "token" and load({}).violations() == []
    problems = load({"WORKER_AUTH_MODE": "open"}).violations()
    assert "authMode (WORKER_AUTH_MODE) must be one of token, mtls, none (got 'open')" in problems
    assert load({"WORKER_AUTH_MODE": "none"}).violations() == []


def test_mtls_without_a_client_ca_is_a_config_error(tmp_path):
    pem = tmp_path / "x.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n")
    problems = load({"WORKER_AUTH_MODE": "mtls"}).violations()
    assert any(p.startswith("authMode (WORKER_AUTH_MODE) is mtls but tlsClientCa (WORKER_TLS_CLIENT_CA) is not set")
               for p in problems), problems
    problems = load({"WORKER_AUTH_MODE": "mtls", "WORKER_TLS_CERT": str(pem), "WORKER_TLS_KEY": str(pem)}).violations()
    assert any("is mtls but tlsClientCa" in p for p in problems), problems
    assert load({"WORKER_AUTH_MODE": "mtls", "WORKER_TLS_CERT": str(pem), "WORKER_TLS_KEY": str(pem),
                 "WORKER_TLS_CLIENT_CA": str(pem)}).violations() == []


def test_a_bad_tokens_file_is_a_config_error_naming_the_line(tmp_path):
    f = tmp_path / "tokens"
    f.write_text("# ops\nalice s3cr3t-token-of-alice\nbob short\n")
    problems = load({"WORKER_AUTH_TOKENS_FILE": str(f)}).violations()
    assert any(p.startswith("authTokensFile (WORKER_AUTH_TOKENS_FILE):") and "line 3" in p and "'bob'" in p
               for p in problems), problems
    problems = load({"WORKER_AUTH_TOKENS_FILE": str(tmp_path / "missing")}).violations()
    assert any("cannot read the tokens file" in p for p in problems), problems
