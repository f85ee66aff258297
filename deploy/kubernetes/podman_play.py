"""Writes the `podman kube play` variant of deploy/kubernetes/ for one machine.

podman plays Pods and Deployments (one pod, no replicas), not PDBs or HPAs, and a
machine without a cluster network needs host networking. So the variant is made
from the Deployment's own pod template, the same source as the real manifests:
one Pod per worker on host networking, each on its own loopback ports (they
share the host's), an etcd Pod, and the ConfigMap as it is. What changes from
the template is only what a shared host network needs: the listen, metrics and
advertised addresses, the etcd endpoint, no declared ports, probes as `blockx health` commands
(podman runs exec probes, not grpc ones), and the tokens Secret as a host file.

    python deploy/kubernetes/podman_play.py --workers 3 --port 18081 --etcd-port 12379 \\
        --tokens /path/to/tokens > play.yaml
    podman kube play --network host --configmap deploy/kubernetes/configmap.yaml play.yaml
"""
from __future__ import annotations

import argparse
import copy
import pathlib
import sys

import yaml

HERE = pathlib.Path(__file__).resolve().parent
ETCD_IMAGE = "localhost/blockx-etcd:latest"


def load(name: str) -> dict:
    return yaml.safe_load((HERE / name).read_text())


def _probe(src: dict, addr: str) -> dict:
    p = {k: v for k, v in src.items() if k != "grpc"}
    cmd = ["blockx", "health", "--addr", addr, "--rpc-timeout", "3"]
    if src["grpc"].get("service"):
        cmd += ["--service", src["grpc"]["service"]]
    p["exec"] = {"command": cmd}
    return p


def worker_pod(template: dict, i: int, port: int, metrics_port: int, etcd: str, tokens: str,
               image: str | None = None) -> dict:
    spec = copy.deepcopy(template["spec"])
    spec["hostNetwork"] = True
    c = spec["containers"][0]
    if image:
        c["image"] = image
    addr = f"127.0.0.1:{port}"
    override = {"WORKER_LISTEN": addr, "WORKER_ADDR": addr, "METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
                "ETCD_ENDPOINTS": etcd}
    env = [e for e in c["env"] if e["name"] not in override and e["name"] != "POD_IP"]
    c["env"] = env + [{"name": k, "value": v} for k, v in override.items()]
    del c["ports"]                      # podman maps declared ports, which host networking cannot
    for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
        if kind in c:
            c[kind] = _probe(c[kind], addr)
    spec["volumes"] = [{"name": v["name"], "hostPath": {"path": tokens, "type": "File"}} if "secret" in v else v
                       for v in spec["volumes"]]
    for m in c["volumeMounts"]:
        if any(v["name"] == m["name"] and "hostPath" in v for v in spec["volumes"]):
            m["mountPath"] = m["mountPath"] + "/tokens"          # a host file, where the Secret's key was
    # podman 4.3 keeps an emptyDir as a named volume: one name a pod, so pods share no STATE_DIR.
    scratch = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
    spec["volumes"] = [{**v, "name": f"blockx-worker-{i}-{v['name']}"} if v["name"] in scratch else v
                       for v in spec["volumes"]]
    c["volumeMounts"] = [{**m, "name": f"blockx-worker-{i}-{m['name']}"} if m["name"] in scratch else m
                         for m in c["volumeMounts"]]
    meta = copy.deepcopy(template["metadata"])
    meta["name"] = f"blockx-worker-{i}"
    meta["annotations"]["prometheus.io/port"] = str(metrics_port)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def etcd_pod(port: int) -> dict:
    peer = port + 1
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "blockx-etcd", "labels": {"app.kubernetes.io/name": "blockx-etcd"}},
            "spec": {"hostNetwork": True, "containers": [{
                "name": "etcd", "image": ETCD_IMAGE,
                "args": ["--data-dir", "/tmp/etcd", "--name", "play",
                         "--listen-client-urls", f"http://127.0.0.1:{port}",
                         "--advertise-client-urls", f"http://127.0.0.1:{port}",
                         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                         "--initial-cluster", f"play=http://127.0.0.1:{peer}"]}]}}


def play(workers: int, port: int, etcd_port: int, tokens: str, image: str | None = None) -> list[dict]:
    template = load("deployment.yaml")["spec"]["template"]
    etcd = f"127.0.0.1:{etcd_port}"
    return [etcd_pod(etcd_port)] + [worker_pod(template, i, port + i, port + 100 + i, etcd, tokens, image)
                                    for i in range(workers)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--port", type=int, default=18081, help="the first worker's gRPC port (metrics: +100)")
    ap.add_argument("--etcd-port", type=int, default=12379)
    ap.add_argument("--tokens", required=True, help="the tokens file the workers mount (the Secret's content)")
    ap.add_argument("--image", default=None, help="the worker image (default: the Deployment's)")
    ns = ap.parse_args(argv)
    yaml.safe_dump_all(play(ns.workers, ns.port, ns.etcd_port, ns.tokens, ns.image), sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
