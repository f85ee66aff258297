"""Helpers of the dashboard's e2e suites: a task submitted as a given identity (its
own bearer token), and one HTTP request to the dashboard with a cookie, headers
and, for https, the CA to trust."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

from blockx.worker.v1 import worker_pb2 as pb
from blockx.worker.v1 import worker_pb2_grpc as pb_grpc
from tests.support import auth


def submit(worker, token: str, task_id: str, calls: list[tuple[str, list]]) -> None:
    ch = auth.channel(f"127.0.0.1:{worker.port}", token=token)
    try:
        task = pb.Task(task_id=task_id, function_call=pb.FunctionCallConfig(type="callList", payload=json.dumps(
            {"calls": [{"functionId": f, "args": a} for f, a in calls]}).encode()))
        pb_grpc.WorkerServiceStub(ch).SubmitTask(pb.SubmitTaskRequest(task=task), timeout=10)
    finally:
        ch.close()


def http(url: str, *, cookie: str = "", method: str = "GET", body: dict | None = None,
         headers: dict | None = None, ssl_context=None) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={**({"Cookie": cookie} if cookie else {}), **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10, context=ssl_context) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()
