"""blockx.client: a typed client of BlockX Workers for Coordinators and scripts.

    async with WorkerClient("127.0.0.1:8081") as client:
        outcome = await client.submit(calls=[("add", [1, 2])])
        print(outcome.state, outcome.outputs)          # SUCCEEDED [3]

    with connect("127.0.0.1:8081") as client:          # the synchronous facade
        for outcome in client.map("add1", range(10)):
            print(outcome.outputs)

    async with Cluster("127.0.0.1:2379") as cluster:   # every worker registered in etcd
        outcome = await cluster.submit(calls=[("add", [1, 2])])
        print(outcome.worker, outcome.attempts)

Everything goes over one TaskSession stream per worker. A large result comes in
pages: calls return its first page (``TaskOutcome.outputs_truncated``) unless
asked for ``all_outputs=True``; ``outputs(task_id)`` iterates every output
(blockx.client.pages; ``PagingError`` if the pages do not join up). Refusals raise typed
exceptions (NoSlot, Unavailable, InvalidArgument, InvalidSlot, NotFound,
SlotUncertain, AlreadyExists, Unauthenticated, PermissionDenied; TracingOff from
trace()) with the Worker's message; a broken session raises SessionBroken. An
address where no Worker answers raises at once an Unreachable (an Unavailable):
NothingListens (connection refused) or NoAnswer (nothing within the connect
timeout, 1 s by default), blockx.client.reach.
A task that FAILED is an outcome, not an exception, unless asked:
``outcome.result()`` returns the outputs or raises ``TaskFailed``, whose str()
holds the remote traceback and the failed frame's locals.
Credentials (a Worker with WORKER_AUTH_MODE=token): ``token=`` or $BLOCKX_TOKEN,
else the token the Worker generated on this host (blockx.credentials).
"""
from blockx.client.cluster import Cluster
from blockx.client.errors import (
    AlreadyExists, BlockxError, InvalidArgument, InvalidSlot, NoSlot, NotFound, PermissionDenied, SessionBroken,
    SlotUncertain, TaskFailed, TracingOff, Unauthenticated, Unavailable,
)
from blockx.client.outcome import SlotLease, TaskOutcome, TaskProgress, TaskUpdate
from blockx.client.pages import PagingError
from blockx.client.reach import NoAnswer, NothingListens, Unreachable
from blockx.client.registry import RegistryView, WorkerInfo
from blockx.client.sync import SyncWorkerClient, connect
from blockx.client.tasks import build_task, call_list_payload
from blockx.tls.client_tls import ClientTLS
from blockx.client.trace import TaskTrace
from blockx.client.worker_client import WorkerClient

__all__ = [
    "AlreadyExists", "PermissionDenied", "Unauthenticated",
    "NoAnswer", "NothingListens", "Unreachable",
    "BlockxError", "ClientTLS", "Cluster", "InvalidArgument", "InvalidSlot", "NoSlot", "NotFound", "PagingError",
    "SessionBroken",
    "SlotLease", "RegistryView", "SlotUncertain", "SyncWorkerClient", "TaskFailed", "TaskOutcome", "TaskProgress", "TaskTrace", "TaskUpdate", "TracingOff", "Unavailable",
    "WorkerClient", "WorkerInfo",
    "build_task", "call_list_payload", "connect",
]
