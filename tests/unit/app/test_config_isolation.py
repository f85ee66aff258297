"""Config rules of the isolation and trust settings (issue 14)."""
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
