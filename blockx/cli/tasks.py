"""`blockx cancel`, `blockx tasks` and `blockx health`: an operator's verbs on one Worker.

- `blockx cancel TASK_ID [--reason TEXT]`: CancelTask over a session. The task
  ends FAILED / CANCELLED (its calls are cancelled, its plugin writes nothing);
  prints the task as `blockx result` does. Exit 0 when this command cancelled it,
  3 when it was already FAILED, 0 when it had SUCCEEDED (nothing changed), 1 on
  a refusal (NOT_FOUND for an unknown task and for another identity's, with the
  same message: only the owner or an admin cancels).
- `blockx tasks [--state S] [--phase P] [--instance ID] [--page-size N]
  [--page-token T | --all] [--json]`: ListTasks, a table (or one JSON object)
  of the caller's tasks (an admin's: every task) with state, phase, age, calls
  done/total and owner. The next page's token is printed under the table.
- `blockx health [--service NAME]`: the grpc.health.v1 check scripts and probes
  use; no credentials needed. Exit 0 SERVING (ready), 1 not ready or draining,
  2 bad usage or the worker could not be reached."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from blockx.cli.connection import client_command, tls_from_args
from blockx.cli.output import dump, exit_for, response_to_json
from blockx.cli.help import RAW, epilog
from blockx.cli.status_render import fmt_duration
from blockx.cli.exit import EXIT_ERROR, EXIT_OK, EXIT_USAGE, CLIError, UsageError
from blockx.cli.text import term_safe

STATES = ("allocated", "running", "succeeded", "failed")
PHASES = ("reserved", "preparing", "builder", "calls", "plugin", "terminal")
HEALTH_EXIT_CODES = """exit codes:
  0    the worker is ready: its health service answers SERVING
  1    the worker answers but is not ready (no healthy executor yet) or is draining
  2    bad usage, or no worker answered: nothing listens at the address, or nothing
       answered within --connect-timeout (or a Check within --rpc-timeout)"""


def add_parsers(sub, client: argparse.ArgumentParser) -> None:
    c = sub.add_parser("cancel", parents=[client], help="cancel a task", description=(
        "Cancel a task: it ends FAILED with failure code CANCELLED (not retryable); its calls are "
        "cancelled, its plugin writes nothing, its watchers get the terminal update. A task that "
        "already ended is printed as it is. Only the task's owner or an admin may cancel it."),
        epilog=epilog("blockx cancel t1 --reason 'wrong input'"), **RAW)
    c.add_argument("task_id", metavar="TASK_ID")
    c.add_argument("--reason", default="", help="why (shown in the task's failure message; at most 1024 characters)")
    c.set_defaults(func=cmd_cancel)

    t = sub.add_parser("tasks", parents=[client], help="list tasks (state, phase, age, calls, owner)",
                       description=(
        "List the tasks this identity owns on the worker (an admin: every task), in task id order: "
        "state, phase, age, calls done/total, owner, instance. Filters combine; --state and --phase "
        "repeat. A table, or JSON with --json (int64 fields as numbers)."), epilog=epilog(
        "blockx tasks --state running",
        "blockx tasks --phase calls --phase plugin --instance i1 --json",
        "blockx tasks --all --json --compact"), **RAW)
    t.add_argument("--state", action="append", default=[], choices=STATES, help="only tasks in this state")
    t.add_argument("--phase", action="append", default=[], choices=PHASES, help="only tasks in this phase")
    t.add_argument("--instance", default="", metavar="ID", help="only this instance's tasks")
    t.add_argument("--page-size", type=int, default=0, metavar="N",
                   help="tasks per page (0: the worker's default, 100; at most 1000 are served)")
    mode = t.add_mutually_exclusive_group()
    mode.add_argument("--page-token", default="", metavar="TOKEN", help="the next page's token, as printed")
    mode.add_argument("--all", action="store_true", help="walk every page")
    t.add_argument("--json", action="store_true", help="print JSON instead of a table")
    t.set_defaults(func=cmd_tasks)

    h = sub.add_parser("health", parents=[client], help="exit 0 when the worker is ready (for scripts and probes)",
                       description=(
        "Ask the worker's grpc.health.v1 service (no credentials needed) and exit with its answer: "
        "0 when it is SERVING (ready: an executor is healthy, not draining). Prints the status."),
        epilog=epilog("blockx health --addr 127.0.0.1:8081",
                      "blockx health --addr 127.0.0.1:8081 --rpc-timeout 2", codes=HEALTH_EXIT_CODES), **RAW)
    h.add_argument("--service", default="", metavar="NAME",
                   help="the service to check (default: the whole server; blockx.worker.v1.WorkerService "
                        "answers the same)")
    h.set_defaults(func=cmd_health)


# ---- cancel ---------------------------------------------------------------------------


@client_command
def _cancel(ns: argparse.Namespace, client, out: TextIO) -> int:
    resp = client.cancel(ns.task_id, ns.reason).raw
    obj = response_to_json(resp)
    obj["cancelled"] = resp.cancelled
    dump(obj, ns.compact, out)
    return EXIT_OK if resp.cancelled else exit_for(resp.state)


def cmd_cancel(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    return _cancel(ns, out)


# ---- tasks ----------------------------------------------------------------------------


def summary_to_json(t) -> dict[str, Any]:
    from blockx.client.outcome import state_name

    return {"taskId": t.task_id, "state": state_name(t.state), "phase": t.phase, "owner": t.owner,
            "instanceId": t.instance_id, "slotId": t.slot_id, "createdAtMs": t.created_at_ms,
            "finishedAtMs": t.finished_at_ms, "ageMs": t.age_ms, "callsTotal": t.calls_total,
            "callsDone": t.calls_done, "failureCode": t.failure_code}


def _age(ms: int) -> str:
    return f"{ms}ms" if ms < 1000 else fmt_duration(ms)


def table_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Fixed columns, every worker-sent string escaped for the terminal."""
    head = ("TASK", "STATE", "PHASE", "AGE", "CALLS", "OWNER", "INSTANCE", "FAILURE")
    cells = [head] + [(term_safe(r["taskId"]), r["state"], r["phase"], _age(r["ageMs"]),
                       f"{r['callsDone']}/{r['callsTotal']}", term_safe(r["owner"]) or "-",
                       term_safe(r["instanceId"]) or "-", term_safe(r["failureCode"]) or "-") for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    return ["  ".join(c[i].ljust(widths[i]) for i in range(len(head))).rstrip() for c in cells]


@client_command
def _tasks(ns: argparse.Namespace, client, out: TextIO) -> int:
    rows: list[dict[str, Any]] = []
    token = ns.page_token
    while True:
        page = client.list_tasks(states=ns.state, phases=ns.phase, instance_id=ns.instance,
                                 page_size=ns.page_size, page_token=token, timeout_s=ns.rpc_timeout)
        rows += [summary_to_json(t) for t in page.tasks]
        token = page.next_page_token
        if not (ns.all and token):
            break
    if ns.json:
        dump({"tasks": rows, "nextPageToken": token}, ns.compact, out)
    else:
        for line in table_lines(rows):
            out.write(line + "\n")
        if token:
            out.write(f"more: blockx tasks --page-token {token}\n")
        out.flush()
    return EXIT_OK


def cmd_tasks(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    if ns.page_size < 0:
        raise UsageError(f"--page-size is {ns.page_size}: it must be 0 (the worker's default) or positive")
    return _tasks(ns, out)


# ---- health ---------------------------------------------------------------------------


def cmd_health(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    """0 SERVING, 1 any other answer, 2 no answer (HEALTH_EXIT_CODES)."""
    import asyncio

    out = out or sys.stdout
    try:
        tls = tls_from_args(ns)
    except CLIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from blockx.tls.client_tls import TLSFileError

    try:
        resp = asyncio.run(_check_health(ns, tls))
    except TLSFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:                       # an address grpc cannot parse
        print(f"error: --addr {ns.addr!r}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except _NoHealth as exc:
        if exc.service_unknown:                     # the server answers: it knows no such service
            print(f"{ns.addr}: SERVICE_UNKNOWN ({term_safe(ns.service)!r} is not a service of this worker)",
                  file=out)
            return EXIT_ERROR
        print(f"error: {exc.code}: cannot check the health of {ns.addr}: {term_safe(exc.message)}",
              file=sys.stderr)
        return EXIT_USAGE
    from grpc_health.v1 import health_pb2

    status = health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
    print(f"{ns.addr}: {status}", file=out)
    out.flush()
    return EXIT_OK if resp.status == health_pb2.HealthCheckResponse.SERVING else EXIT_ERROR


class _NoHealth(Exception):
    def __init__(self, code: str, message: str, service_unknown: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.service_unknown = service_unknown


async def _check_health(ns: argparse.Namespace, tls):
    """The Check answer, once the address answered (blockx.client.reach: a refused
    or silent address is told at once, not as the RPC's DEADLINE_EXCEEDED)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from blockx.cli.connection import connect_timeout
    from blockx.client.reach import Unreachable, wait_ready
    from blockx.tls.client_tls import aio_channel

    channel = aio_channel(ns.addr, tls)
    try:
        try:
            await wait_ready(channel, ns.addr, min(connect_timeout(ns), ns.rpc_timeout), tls=tls is not None)
        except Unreachable as exc:
            raise _NoHealth(exc.code.name, exc.message) from None
        try:
            return await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=ns.service), timeout=ns.rpc_timeout)
        except grpc.RpcError as exc:
            code = exc.code()
            raise _NoHealth(code.name, exc.details() or "", code == grpc.StatusCode.NOT_FOUND) from None
    finally:
        await channel.close()


__all__ = ["HEALTH_EXIT_CODES", "add_parsers", "cmd_cancel", "cmd_health", "cmd_tasks", "summary_to_json",
           "table_lines"]
