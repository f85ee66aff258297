"""deploy/kubernetes/: every manifest is valid against the Kubernetes API schemas
(kubernetes-validate, strict: an unknown field fails too), and the manifests agree
with the Worker: the stop grace outlasts the drain, the probes name the health
services the Worker serves, the config the ConfigMap carries loads and validates."""
from __future__ import annotations

import copy
import json
import pathlib

import kubernetes_validate
import pytest
import yaml

from blockx.adapters.grpc.server import LIVENESS_SERVICE
from blockx.app.config import WorkerFullConfig, load_config
from blockx.app.profile import BLOCK
from blockx.app.run import GRPC_STOP_GRACE_S

ROOT = pathlib.Path(__file__).resolve().parents[3]
KUBE = ROOT / "deploy" / "kubernetes"
K8S_VERSION = "1.30.0"


def docs() -> dict[str, dict]:
    out = {}
    for path in sorted(KUBE.glob("*.yaml")):
        for d in yaml.safe_load_all(path.read_text()):
            if d:
                out[d["kind"]] = d
    return out


def validate(doc: dict) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize("kind", ["ConfigMap", "Secret", "Deployment", "PodDisruptionBudget",
                                  "HorizontalPodAutoscaler"])
def test_each_manifest_is_valid_against_the_api_schema(kind):
    validate(docs()[kind])


def test_the_schema_check_refuses_a_broken_manifest():
    bad = copy.deepcopy(docs()["Deployment"])
    bad["spec"]["template"]["spec"]["terminationGracePeriodSecond"] = 45       # misspelt
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad)
    bad = copy.deepcopy(docs()["Deployment"])
    bad["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpc"]["port"] = "grpc"  # must be an int
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad)


def worker_container(d=None) -> dict:
    d = d or docs()
    return d["Deployment"]["spec"]["template"]["spec"]["containers"][0]


def worker_config() -> dict:
    return json.loads(docs()["ConfigMap"]["data"]["worker.json"])


def test_the_stop_grace_outlasts_the_drain_and_the_grpc_grace():
    spec = docs()["Deployment"]["spec"]["template"]["spec"]
    drain_ms = worker_config().get("drainTimeoutMs", WorkerFullConfig().drain_timeout_ms)
    assert spec["terminationGracePeriodSeconds"] > drain_ms / 1000 + GRPC_STOP_GRACE_S


def test_readiness_is_plain_health_and_liveness_holds_while_draining():
    c = worker_container()
    assert c["readinessProbe"]["grpc"].get("service", "") == ""
    assert c["livenessProbe"]["grpc"]["service"] == LIVENESS_SERVICE
    grpc_port = next(p["containerPort"] for p in c["ports"] if p["name"] == "grpc")
    assert c["readinessProbe"]["grpc"]["port"] == c["livenessProbe"]["grpc"]["port"] == grpc_port


def test_the_config_map_loads_and_validates_with_the_pod_env(tmp_path):
    d = docs()
    env = {e["name"]: e["value"] for e in worker_container(d)["env"] if "value" in e}
    env["WORKER_ADDR"] = env["WORKER_ADDR"].replace("$(POD_IP)", "10.1.2.3")
    mounts = {m["name"]: m["mountPath"] for m in worker_container(d)["volumeMounts"]}
    assert env["WORKER_CONFIG"] == mounts["config"] + "/worker.json"
    assert env["WORKER_AUTH_TOKENS_FILE"] == mounts["tokens"] + "/" + next(iter(d["Secret"]["stringData"]))
    (tmp_path / "worker.json").write_text(d["ConfigMap"]["data"]["worker.json"])
    env["WORKER_CONFIG"] = str(tmp_path / "worker.json")                 # where the pod mounts it
    del env["WORKER_AUTH_TOKENS_FILE"]                                  # a file that exists only in the pod
    cfg = load_config(BLOCK, env=env)
    assert cfg.violations() == []
    assert cfg.worker_addr == "10.1.2.3:8081" and cfg.functions_source == "etcd"


def test_prometheus_annotations_name_the_metrics_port_and_selectors_match():
    d = docs()
    tmpl = d["Deployment"]["spec"]["template"]
    c = worker_container(d)
    env = {e["name"]: e.get("value") for e in c["env"]}
    ann = tmpl["metadata"]["annotations"]
    metrics_port = next(p["containerPort"] for p in c["ports"] if p["name"] == "metrics")
    assert ann["prometheus.io/scrape"] == "true" and int(ann["prometheus.io/port"]) == metrics_port
    assert env["METRICS_LISTEN"].endswith(f":{metrics_port}")
    labels = tmpl["metadata"]["labels"]
    for sel in (d["Deployment"]["spec"]["selector"], d["PodDisruptionBudget"]["spec"]["selector"]):
        assert sel["matchLabels"].items() <= labels.items()
    assert d["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["name"] == d["Deployment"]["metadata"]["name"]
