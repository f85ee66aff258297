"""The fleet commands: `blockx workers`, `blockx functions push|list`, `blockx submit --etcd`.

`blockx workers` reads the registry prefix and prints one row per registered
Worker (address, ready, draining, free / total slots, healthy / total executors,
heartbeat age); `--watch` keeps the table on screen, redrawn in place on every
registry change (an etcd watch, not a polling loop) and once a second for the
ages; `--json` prints the heartbeats as JSON instead.

`blockx functions push DIR` uploads every `<id>.py` of DIR to
`/blockx/functions/<id>` in ONE etcd transaction (all or nothing) and prints the
new revision, which is the code epoch the Workers move to. Everything is checked
before anything is written: a file that is not UTF-8, a name that is not a valid
function id, a value (or the whole transaction) over etcd's request size limit
(1.5 MiB unless --max-request-bytes says otherwise) are refused with the reason.
Files starting with "_" or "." are skipped, as the directory source does.
`blockx functions list` prints each function's id, sha256 digest and size.
With `--redis URL` both commands work on function code in Redis
(FUNCTIONS_SOURCE=redis) instead: push writes the hash `<prefix>sources`, bumps
`<prefix>epoch` and publishes on `<prefix>changed` in ONE MULTI/EXEC, after the
same checks (with the Worker's per-source limit in place of etcd's request size).

`--etcd` takes comma-separated endpoints (host:port); its default is $BLOCKX_ETCD,
else 127.0.0.1:2379. Exit codes as the other client commands (blockx.cli.exit)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from blockx.cli.exit import EXIT_ERROR, EXIT_OK, EXIT_TASK_FAILED, CLIError, UsageError
from blockx.cli.text import term_safe
from blockx.plugins.function_code.redis_store import DEFAULT_REDIS_PREFIX

DEFAULT_ETCD = "127.0.0.1:2379"
DEFAULT_WORKERS_PREFIX = "/blockx/workers/"
DEFAULT_FUNCTIONS_PREFIX = "/blockx/functions/"
# etcd's default --max-request-bytes; a transaction is one request.
ETCD_MAX_REQUEST_BYTES = 1572864
# Room for the request's own framing (keys, op headers) beside the values.
_TXN_OVERHEAD_PER_OP = 64


def default_etcd() -> str:
    return os.environ.get("BLOCKX_ETCD") or DEFAULT_ETCD


def add_etcd_security(p: argparse.ArgumentParser) -> None:
    """TLS and the etcd user: the flags default to the Worker's own environment
    variables, so one environment serves the Worker and the CLI alike."""
    g = p.add_argument_group("etcd TLS and authentication (default: the ETCD_* environment variables)")
    g.add_argument("--etcd-ca", default=None, metavar="PEM", help="CA of etcd's certificate: TLS on ($ETCD_CA_CERT)")
    g.add_argument("--etcd-cert", default=None, metavar="PEM", help="client certificate ($ETCD_CERT)")
    g.add_argument("--etcd-key", default=None, metavar="PEM", help="its key ($ETCD_KEY)")
    g.add_argument("--etcd-server-name", default=None, metavar="NAME",
                   help="name etcd's certificate is checked for ($ETCD_SERVER_NAME)")
    g.add_argument("--etcd-user", default=None, metavar="USER", help="etcd user ($ETCD_USER)")
    g.add_argument("--etcd-password-file", default=None, metavar="FILE",
                   help="file holding the etcd user's password ($ETCD_PASSWORD_FILE, or $ETCD_PASSWORD)")


def etcd_connection(ns: argparse.Namespace, endpoints: str | None = None):
    """The EtcdConnection of the command line: flags over the ETCD_* environment."""
    from blockx.etcd.connection import EtcdConnection

    env = os.environ
    def pick(flag: str, var: str) -> str:
        v = getattr(ns, flag, None)
        return env.get(var, "") if v is None else v
    password_file = pick("etcd_password_file", "ETCD_PASSWORD_FILE")
    try:
        return EtcdConnection.create(
            endpoints if endpoints is not None else ns.etcd, ca=pick("etcd_ca", "ETCD_CA_CERT"),
            cert=pick("etcd_cert", "ETCD_CERT"), key=pick("etcd_key", "ETCD_KEY"),
            server_name=pick("etcd_server_name", "ETCD_SERVER_NAME"), user=pick("etcd_user", "ETCD_USER"),
            password="" if password_file else env.get("ETCD_PASSWORD", ""), password_file=password_file)
    except ValueError as exc:
        raise UsageError(f"etcd settings: {exc} (flags --etcd-*, or the ETCD_* environment variables)") from None


def add_parsers(sub, client_parent: argparse.ArgumentParser) -> None:
    """The `workers` and `functions` subcommands (called by blockx.cli.build_parser)."""
    etcd = argparse.ArgumentParser(add_help=False)
    etcd.add_argument("--etcd", default=default_etcd(), metavar="ENDPOINTS",
                      help=f"etcd endpoints, comma-separated (default: $BLOCKX_ETCD or {DEFAULT_ETCD})")
    add_etcd_security(etcd)
    etcd.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="etcd request deadline")

    from blockx.cli.completers import directory
    from blockx.cli.help import RAW, epilog

    w = sub.add_parser("workers", parents=[etcd], help="list the workers registered in etcd", description=(
        "Print one row per Worker registered under --prefix: address, ready, draining, free / total "
        "slots, healthy / total executors, heartbeat age; --watch redraws it on every change."),
        epilog=epilog("blockx workers --etcd 127.0.0.1:2379", "blockx workers --watch"), **RAW)
    w.add_argument("--prefix", default=DEFAULT_WORKERS_PREFIX, help="registry prefix (default: %(default)s)")
    w.add_argument("--watch", action="store_true", help="keep the table on screen, refreshed in place")
    w.add_argument("--json", action="store_true", help="print the heartbeats as JSON")
    w.add_argument("--prometheus-sd", action="store_true",
                   help="print a Prometheus file_sd target list (JSON) of the workers' metricsAddr")
    w.set_defaults(func=cmd_workers)

    f = sub.add_parser("functions", help="function code in etcd or Redis (FUNCTIONS_SOURCE=etcd|redis)",
                       description=(
        "Upload or list the function code that Workers with FUNCTIONS_SOURCE=etcd or redis serve."),
        epilog=epilog("blockx functions push ./functions", "blockx functions list --json",
                      "blockx functions push ./functions --redis redis://127.0.0.1:6379/0"), **RAW)
    fsub = f.add_subparsers(dest="functions_command", metavar="SUBCOMMAND")
    fsub.required = True
    redis = argparse.ArgumentParser(add_help=False)
    redis.add_argument("--redis", default=None, metavar="URL",
                       help="function code in Redis (FUNCTIONS_SOURCE=redis) instead of etcd, "
                            "e.g. redis://127.0.0.1:6379/0")
    prefix_help = f"(default: {DEFAULT_FUNCTIONS_PREFIX}, with --redis {DEFAULT_REDIS_PREFIX})"
    push = fsub.add_parser("push", parents=[etcd, redis], help="upload every <id>.py of DIR in one transaction",
                           description=(
        "Upload every <id>.py of DIR in one transaction (all or nothing): to PREFIX<id> in etcd, printing the "
        "new revision (the code epoch the Workers move to), or with --redis to the PREFIXsources hash, "
        "bumping PREFIXepoch. Everything is checked first (UTF-8, function ids, the store's size limits)."),
        epilog=epilog("blockx functions push ./functions --etcd 127.0.0.1:2379",
                      "blockx functions push ./functions --redis redis://127.0.0.1:6379/0"), **RAW)
    directory(push.add_argument("directory", metavar="DIR", help="directory of <function id>.py files"))
    push.add_argument("--prefix", default=None, help=prefix_help)
    push.add_argument("--max-request-bytes", type=int, default=ETCD_MAX_REQUEST_BYTES,
                      help="etcd's request size limit (default: %(default)s, etcd's own default)")
    push.set_defaults(func=cmd_functions_push)
    ls = fsub.add_parser("list", parents=[etcd, redis], help="function ids, digests and sizes", description=(
        "Print each function under --prefix: its id, the sha256 of its source and its size."),
        epilog=epilog("blockx functions list", "blockx functions list --json",
                      "blockx functions list --redis redis://127.0.0.1:6379/0"), **RAW)
    ls.add_argument("--prefix", default=None, help=prefix_help)
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=cmd_functions_list)


# --- etcd plumbing ---------------------------------------------------------------------


async def _kv(conn, fn, timeout: float):
    """Run ``fn(kv_stub, timeout, metadata)`` against the first endpoint of the
    EtcdConnection ``conn`` that answers."""
    import grpc
    from aetcd import rpc

    from blockx.etcd.connection import EtcdAuthError, describe_etcd_error

    if not conn.endpoints:
        raise UsageError("--etcd: no endpoints given")
    last: Exception | None = None
    for ep in conn.endpoints:
        async with conn.channel(ep) as ch:
            try:
                md = await conn.metadata(ch, timeout)
                return await fn(rpc.KVStub(ch), timeout, md)
            except (grpc.aio.AioRpcError, EtcdAuthError) as exc:
                last = exc
    assert last is not None           # endpoints is not empty: each one failed
    raise CLIError(f"etcd {','.join(conn.targets)}: {describe_etcd_error(last, conn)}")


async def read_prefix(conn, prefix: str, timeout: float = 5.0):
    """(revision, [(key, value, mod_revision), ...]) of every key under ``prefix``."""
    from aetcd import rpc

    from blockx.etcd.prefix_watch import prefix_range_end

    async def go(kv, t, md):
        r = await kv.Range(rpc.RangeRequest(key=prefix.encode(), range_end=prefix_range_end(prefix.encode())),
                           timeout=t, metadata=md)
        return r.header.revision, [(x.key.decode(errors="replace"), x.value, x.mod_revision) for x in r.kvs]
    return await _kv(conn, go, timeout)


# --- blockx workers ----------------------------------------------------------------------


def workers_table(workers, now_ms: int | None = None) -> str:
    """The table `blockx workers` prints, from WorkerInfo objects (addresses escaped
    for the terminal: they are etcd keys, which anyone with write access chose)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    rows = [("ADDRESS", "READY", "DRAINING", "SLOTS FREE/TOTAL", "EXECUTORS OK/TOTAL", "HEARTBEAT AGE")]
    for w in sorted(workers, key=lambda w: w.addr):
        age = w.heartbeat_age_ms(now_ms)
        rows.append((term_safe(w.addr), "yes" if w.ready else "no", "yes" if w.draining else "no",
                     f"{w.free_slots}/{w.task_slots}", f"{w.executors_healthy}/{w.executors_total}",
                     "?" if age < 0 else f"{age / 1000:.1f}s"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    lines.append(f"{len(rows) - 1} worker(s)")
    return "\n".join(lines)


def cmd_workers(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if ns.watch:
        return asyncio.run(_watch_workers(ns, out))
    from blockx.client.registry import WorkerInfo

    _rev, kvs = asyncio.run(read_prefix(etcd_connection(ns), ns.prefix, ns.timeout))
    infos = [WorkerInfo.parse(k[len(ns.prefix):], v, r, 0.0) for k, v, r in kvs]
    if ns.prometheus_sd:
        from blockx.cli.prometheus_sd import prometheus_sd
        out.write(json.dumps(prometheus_sd(infos), indent=2) + "\n")
    elif ns.json:
        out.write(json.dumps({i.addr: i.heartbeat for i in infos}, indent=2, sort_keys=True) + "\n")
    else:
        out.write(workers_table(infos) + "\n")
    return EXIT_OK


async def _watch_workers(ns: argparse.Namespace, out: TextIO) -> int:
    from blockx.client.registry import RegistryView

    view = RegistryView(etcd_connection(ns), ns.prefix)
    if not await view.start(ns.timeout):
        raise CLIError(f"etcd {ns.etcd} did not answer within {ns.timeout:g} s ({view.last_error or 'no answer'})")
    try:
        while True:
            changed = view.changed
            status = "" if view.connected else "  (etcd unreachable: last known view)"
            out.write("\x1b[H\x1b[J" + workers_table(view.workers.values()) + status + "\n")
            out.flush()
            try:
                await asyncio.wait_for(changed.wait(), 1.0)
            except asyncio.TimeoutError:
                pass
    finally:
        await view.stop()


# --- blockx functions --------------------------------------------------------------------


def collect_functions(directory: str, prefix: str, max_request_bytes: int | None, *,
                      max_source_bytes: int | None = None) -> list[tuple[str, bytes]]:
    """[(key, source bytes), ...] for every <id>.py of ``directory``; CLIError (nothing
    written) naming every problem if any file cannot be pushed. ``max_request_bytes``:
    etcd's request size limit (None: no such limit); ``max_source_bytes``: the
    Worker's limit for one source (a larger one would be skipped by every Worker)."""
    from blockx.plugins.function_code.etcd import valid_function_id

    d = Path(directory)
    if not d.is_dir():
        raise UsageError(f"{directory!r} is not a directory")
    problems: list[str] = []
    out: list[tuple[str, bytes]] = []
    for path in sorted(d.iterdir()):
        name = path.name
        if not name.endswith(".py") or name[0] in "._" or not path.is_file():
            continue
        fid = name[:-3]
        if not valid_function_id(fid):
            problems.append(f"{name}: {fid!r} is not a valid function id "
                            "(letters, digits, '_', '-', '.'; starting with a letter or digit; at most 128)")
            continue
        raw = path.read_bytes()
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(f"{name}: not UTF-8 ({exc.reason} at byte {exc.start})")
            continue
        key = prefix + fid
        if max_source_bytes is not None and len(raw) > max_source_bytes:
            problems.append(f"{name}: {len(raw)} bytes, over the Worker's limit for one function source "
                            f"({max_source_bytes})")
            continue
        if max_request_bytes is not None and len(raw) + len(key) + _TXN_OVERHEAD_PER_OP > max_request_bytes:
            problems.append(f"{name}: {len(raw)} bytes, over etcd's request size limit ({max_request_bytes})")
            continue
        out.append((key, raw))
    if not problems and max_request_bytes is not None:
        total = sum(len(k) + len(v) + _TXN_OVERHEAD_PER_OP for k, v in out)
        if total > max_request_bytes:
            problems.append(f"the directory is {total} bytes in one transaction, over etcd's request size "
                            f"limit ({max_request_bytes}); split it or raise etcd's --max-request-bytes")
    if problems:
        raise CLIError("nothing pushed:\n  " + "\n  ".join(problems))
    if not out:
        raise CLIError(f"nothing pushed: no <functionId>.py files in {directory!r}")
    return out


async def push_functions(conn, items: list[tuple[str, bytes]], timeout: float = 5.0) -> int:
    """Write every (key, value) in one transaction; the transaction's revision."""
    from aetcd import rpc

    async def go(kv, t, md):
        ops = [rpc.RequestOp(request_put=rpc.PutRequest(key=k.encode(), value=v)) for k, v in items]
        r = await kv.Txn(rpc.TxnRequest(success=ops), timeout=t, metadata=md)
        return r.header.revision
    return await _kv(conn, go, timeout)


def cmd_functions_push(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if ns.redis is not None:
        return _redis_push(ns, out)
    ns.prefix = ns.prefix or DEFAULT_FUNCTIONS_PREFIX
    items = collect_functions(ns.directory, ns.prefix, ns.max_request_bytes)
    revision = asyncio.run(push_functions(etcd_connection(ns), items, ns.timeout))
    out.write(f"pushed {len(items)} function(s) to {ns.prefix} at revision {revision}\n")
    return EXIT_OK


def cmd_functions_list(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if ns.redis is not None:
        return _redis_list(ns, out)
    ns.prefix = ns.prefix or DEFAULT_FUNCTIONS_PREFIX
    revision, kvs = asyncio.run(read_prefix(etcd_connection(ns), ns.prefix, ns.timeout))
    rows = [{"functionId": k[len(ns.prefix):], "digest": hashlib.sha256(v).hexdigest(), "bytes": len(v),
             "modRevision": r} for k, v, r in kvs]
    if ns.json:
        out.write(json.dumps({"revision": revision, "functions": rows}, indent=2) + "\n")
        return EXIT_OK
    _functions_table(rows, f"at revision {revision}", out)
    return EXIT_OK


def _functions_table(rows: list[dict[str, Any]], where: str, out: TextIO) -> None:
    """`blockx functions list`'s table (ids escaped for the terminal: anyone with write
    access to the store chose them)."""
    ids = [term_safe(r["functionId"]) for r in rows]
    width = max([len("FUNCTION")] + [len(i) for i in ids])
    out.write(f"{'FUNCTION'.ljust(width)}  {'SHA256':64}  BYTES\n")
    for fid, r in zip(ids, rows):
        out.write(f"{fid.ljust(width)}  {r['digest']}  {r['bytes']}\n")
    out.write(f"{len(rows)} function(s) {where}\n")


# --- blockx functions push|list --redis ----------------------------------------------------


async def _with_redis(url: str, timeout: float, fn):
    """Run ``fn(client, keys_of)`` against the Redis of ``url``; CLIError on Redis trouble."""
    from redis.exceptions import RedisError

    from blockx.plugins.function_code.redis_store import RedisCodeError, redacted_url, redis_client

    try:
        client = redis_client(url, timeout)
    except ValueError as exc:
        raise UsageError(f"--redis {redacted_url(url)!r}: {exc}") from None
    try:
        return await fn(client)
    except (RedisError, RedisCodeError, OSError) as exc:
        raise CLIError(f"redis {redacted_url(url)}: {type(exc).__name__}: {exc}") from None
    finally:
        await client.aclose()


def _redis_keys(prefix: str | None):
    from blockx.plugins.function_code.redis_store import RedisCodeKeys

    try:
        return RedisCodeKeys(prefix or DEFAULT_REDIS_PREFIX)
    except ValueError as exc:
        raise UsageError(f"--prefix: {exc}") from None


def _redis_push(ns: argparse.Namespace, out: TextIO) -> int:
    from blockx.plugins.function_code.redis_store import push_sources
    from blockx.plugins.function_code.view import DEFAULT_MAX_SOURCE_BYTES

    keys = _redis_keys(ns.prefix)
    items = collect_functions(ns.directory, "", None, max_source_bytes=DEFAULT_MAX_SOURCE_BYTES)
    epoch = asyncio.run(_with_redis(ns.redis, ns.timeout, lambda c: push_sources(c, keys, items)))
    out.write(f"pushed {len(items)} function(s) to redis {keys.sources} at epoch {epoch}\n")
    return EXIT_OK


def _redis_list(ns: argparse.Namespace, out: TextIO) -> int:
    from blockx.plugins.function_code.redis_store import read_sources

    keys = _redis_keys(ns.prefix)
    epoch, sources = asyncio.run(_with_redis(ns.redis, ns.timeout, lambda c: read_sources(c, keys)))
    rows = [{"functionId": k.decode(errors="replace"), "digest": hashlib.sha256(v).hexdigest(), "bytes": len(v)}
            for k, v in sorted(sources.items())]
    if ns.json:
        out.write(json.dumps({"epoch": epoch, "functions": rows}, indent=2) + "\n")
        return EXIT_OK
    _functions_table(rows, f"at epoch {epoch}" if epoch is not None else "(no epoch: nothing pushed)", out)
    return EXIT_OK


# --- blockx submit --etcd -----------------------------------------------------------------


def cmd_submit_cluster(ns: argparse.Namespace, task, out: TextIO, dump) -> int:
    """`blockx submit --etcd ...`: place the task through blockx.client.Cluster."""
    return asyncio.run(_submit_cluster(ns, task, out, dump))


async def _submit_cluster(ns: argparse.Namespace, task, out: TextIO, dump) -> int:
    from blockx.cli.connection import token_from_args
    from blockx.cli.output import response_to_json
    from blockx.client import BlockxError, Cluster

    def exit_for(state: str) -> int:
        return EXIT_TASK_FAILED if state == "FAILED" else EXIT_OK

    def shown(outcome) -> dict[str, Any]:
        obj = response_to_json(outcome.raw)
        if "result" in obj and obj["result"]["outputsTruncated"] and not outcome.outputs_truncated:
            obj["result"]["outputs"] = [{"base64": base64.b64encode(o).decode()} if isinstance(o, bytes) else o
                                        for o in outcome.outputs]      # every page (all_outputs)
            obj["result"]["outputsTruncated"] = False
        obj["worker"] = outcome.worker
        obj["attempts"] = outcome.attempts
        return obj

    try:
        async with Cluster(etcd_connection(ns), ns.etcd_prefix, wait_for_worker_s=ns.rpc_timeout,
                           token=token_from_args(ns)) as cluster:
            if ns.no_wait or ns.watch:
                first = await cluster.submit(task=task, wait=False)
                if ns.no_wait or first.is_terminal:
                    dump(shown(first), ns.compact, out)
                    return exit_for(first.state)
                dump(shown(first), True, out)
                last = first.state
                async for upd in cluster.watch([task.task_id]):
                    obj = response_to_json(upd.raw)
                    obj["worker"] = first.worker
                    dump(obj, True, out)
                    last = upd.state
                return exit_for(last)
            outcome = await cluster.submit(task=task, all_outputs=True)
            dump(shown(outcome), ns.compact, out)
            return exit_for(outcome.state)
    except BlockxError as exc:
        print(f"error: {exc.code.name}: {term_safe(exc.message, keep_newlines=True)}", file=sys.stderr)
        return EXIT_ERROR
