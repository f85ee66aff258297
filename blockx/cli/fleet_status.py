"""The fleet at a glance: `blockx status --etcd`, `blockx top --etcd` and
`blockx workers --prometheus-sd`.

`status --etcd ENDPOINTS` reads the registry, then every registered Worker's
GetWorkerStatus at once (in parallel, each bounded by --rpc-timeout), and prints
one row per Worker: state, slots free / total, running tasks, active tasks,
executors healthy / total, task and call rates, and how it is reached (its gRPC
TLS, its auth mode, its etcd connection). GetWorkerStatus needs an admin token:
--token or $BLOCKX_TOKEN, as for `blockx status`. A Worker that does not answer in
time (stopped, partitioned, refusing the token) is shown as UNREACHABLE with the
reason; it never holds the table up. `status` shows rates averaged over each
Worker's uptime; `top --etcd` redraws the table every --interval seconds with the
rates between two reads, and keeps a Worker that left the registry on screen as
GONE for a while; q quits (on a terminal), as does Ctrl-C or --iterations N.

`workers --prometheus-sd` (blockx.cli.prometheus_sd) turns the same registry
into a Prometheus file_sd target list."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

from blockx.cli.exit import EXIT_OK, CLIError, UsageError
from blockx.cli.text import term_safe
from blockx.cli.top import Rates, KeyReader

GONE_KEEP_S = 30.0       # how long `top --etcd` keeps a deregistered worker on screen


@dataclass(slots=True)
class FleetRow:
    addr: str
    heartbeat: dict
    status: Any = None          # pb.WorkerStatus, or None when it did not answer
    error: str = ""
    gone: bool = False
    rates: tuple[float, float] | None = None      # (tasks finished/s, calls finished/s)


async def _one_status(addr: str, ns: argparse.Namespace, timeout: float):
    from blockx.cli.connection import tls_from_args, token_from_args
    from blockx.client import BlockxError, WorkerClient

    async def go():
        async with WorkerClient(addr, connect_timeout_s=timeout, tls=tls_from_args(ns),
                                token=token_from_args(ns)) as c:
            return await c.status(timeout_s=timeout)
    try:
        return await asyncio.wait_for(go(), timeout + 0.5), ""
    except asyncio.TimeoutError:
        return None, f"no answer within {timeout:g}s"
    except BlockxError as exc:
        return None, f"{exc.code.name}: {exc.message}"
    except Exception as exc:  # noqa: BLE001 - one worker's trouble is its row, not the table's
        return None, f"{type(exc).__name__}: {exc}"


async def fleet_rows(ns: argparse.Namespace) -> list[FleetRow]:
    """The registry, then every worker's status in parallel (each bounded)."""
    from blockx.cli.fleet import etcd_connection, read_prefix
    from blockx.client.registry import WorkerInfo

    _rev, kvs = await read_prefix(etcd_connection(ns), ns.etcd_prefix, ns.rpc_timeout)
    infos = [WorkerInfo.parse(k[len(ns.etcd_prefix):], v, r, 0.0) for k, v, r in kvs]
    answers = await asyncio.gather(*(_one_status(i.addr, ns, ns.rpc_timeout) for i in infos))
    return [FleetRow(i.addr, i.heartbeat, st, err) for i, (st, err) in zip(infos, answers)]


def _lifetime_rates(st) -> tuple[float, float] | None:
    up = st.uptime_ms / 1000.0
    if up <= 0:
        return None
    c = st.counters
    return ((c.tasks_succeeded + c.tasks_failed) / up, (c.calls_completed + c.calls_failed) / up)


def fleet_table(rows: list[FleetRow], *, rates_label: str = "avg") -> str:
    head = ("WORKER", "STATE", "SLOTS FREE/TOTAL", "RUNNING", "ACTIVE", "EXECUTORS OK/TOTAL",
            f"TASKS/S({rates_label})", f"CALLS/S({rates_label})", "TLS", "AUTH", "ETCD")
    out = [head]
    for r in sorted(rows, key=lambda r: r.addr):
        hb = r.heartbeat
        sec = (str(hb.get("tls", "?")), str(hb.get("authMode", "?")), str(hb.get("etcdSecurity", "?")))
        if r.gone:
            out.append((r.addr, "GONE", "-", "-", "-", "-", "-", "-", *sec))
            continue
        st = r.status
        if st is None:
            out.append((r.addr, "UNREACHABLE", f"{hb.get('freeSlots', '?')}/{hb.get('taskSlots', '?')}", "-", "-",
                        f"{hb.get('executorsHealthy', '?')}/{hb.get('executorsTotal', '?')}", "-", "-", *sec))
            continue
        state = "draining" if st.draining else ("ready" if st.ready else "not-ready")
        healthy = sum(1 for e in st.executors if e.healthy)
        rates = r.rates if r.rates is not None else (_lifetime_rates(st) if rates_label == "avg" else None)
        tps, cps = ("-", "-") if rates is None else (f"{rates[0]:.1f}", f"{rates[1]:.1f}")
        out.append((r.addr, state, f"{st.slots.free}/{st.slots.total}", str(st.slots.running),
                    str(sum(st.tasks_by_phase.values())), f"{healthy}/{len(st.executors)}", tps, cps, *sec))
    cells = [tuple(term_safe(c) for c in row) for row in out]
    widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip() for row in cells]
    reachable = sum(1 for r in rows if r.status is not None and not r.gone)
    lines.append(f"{len([r for r in rows if not r.gone])} worker(s) registered, {reachable} answered")
    for r in sorted(rows, key=lambda r: r.addr):
        if r.error and not r.gone:
            lines.append(f"  {term_safe(r.addr)}: {term_safe(r.error)}")
    return "\n".join(lines)


def cmd_status_fleet(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    rows = asyncio.run(fleet_rows(ns))
    if getattr(ns, "json", False):
        from blockx.cli.status_render import status_to_json

        out.write(json.dumps({r.addr: {"heartbeat": r.heartbeat, "error": r.error or None,
                                       "status": status_to_json(r.status) if r.status is not None else None}
                              for r in rows}, indent=None if ns.compact else 2, sort_keys=True) + "\n")
    else:
        out.write(fleet_table(rows) + "\n")
    return EXIT_OK


def cmd_top_fleet(ns: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if ns.interval <= 0:
        raise UsageError("--interval must be > 0")
    keys = KeyReader(sys.stdin)
    try:
        return asyncio.run(_top_fleet(ns, out, keys))
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        keys.restore()


async def _top_fleet(ns: argparse.Namespace, out: TextIO, keys) -> int:
    prev: dict[str, tuple[float, Any, dict]] = {}      # addr -> (monotonic, last status, heartbeat)
    gone: dict[str, tuple[float, FleetRow]] = {}
    n = 0
    while True:
        started = time.monotonic()
        try:
            rows = await fleet_rows(ns)
            error = ""
        except CLIError as exc:
            rows, error = [], str(exc)
        seen = {r.addr for r in rows}
        for addr in list(prev):
            if addr not in seen and not error:
                gone[addr] = (started, FleetRow(addr, prev[addr][2], gone=True))
                del prev[addr]
        for r in rows:
            gone.pop(r.addr, None)
            if r.status is not None:
                p = prev.get(r.addr)
                if p is not None and p[1] is not None:
                    rt = Rates.between(p[1], r.status)
                    r.rates = (rt.tasks_finished, rt.calls) if rt is not None else None
                prev[r.addr] = (started, r.status, r.heartbeat)
            elif r.addr not in prev:
                prev[r.addr] = (started, None, r.heartbeat)
        for addr, (t, _row) in list(gone.items()):
            if started - t > GONE_KEEP_S:
                del gone[addr]
        shown = rows + [row for _t, row in gone.values()]
        text = fleet_table(shown, rates_label="now")
        if error:
            text += f"\nerror: {term_safe(error)} (last known view kept)"
        out.write(("\x1b[H\x1b[J" if out.isatty() else "") + text + f"\nrefresh {ns.interval:g}s\n")
        out.flush()
        n += 1
        if ns.iterations and n >= ns.iterations:
            return EXIT_OK
        # the loop has nothing else to do between two reads: wait for q on a terminal
        if keys.wait(max(0.0, ns.interval - (time.monotonic() - started))) in ("q", "Q"):
            return EXIT_OK
