"""The fleet the dashboard shows: which workers there are (FleetSource), and what
each is doing (StatusPoller).

FleetSource follows the etcd registry (blockx.client.registry.RegistryView: read
the prefix, then watch it) or holds a fixed list of addresses. A worker that
leaves the registry stays listed as ``gone`` for ``gone_keep_s``. Only the
addresses it lists (and the recently gone) may be named in a request: the
dashboard never dials an address a browser made up.

StatusPoller reads GetWorkerStatus of every worker in parallel once per
``interval_s``, each bounded by ``timeout_s``, with one admin token (the status
shows the whole worker, so the workers answer it to admin only); it runs while a
page asks for it and stops ``linger_s`` after the last ask. Tenants get the rows
the registry's heartbeats give, without the status part."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from blockx.client import BlockxError
from blockx.dashboard.clients import ClientPool
from blockx.dashboard.history import WorkerHistory
from blockx.dashboard.views import status_row

log = logging.getLogger("blockx.dashboard")

GONE_KEEP_S = 60.0
POLL_INTERVAL_S = 1.0
POLL_TIMEOUT_S = 2.0
LINGER_S = 15.0


class FleetSource:
    def __init__(self, *, addrs: Iterable[str] = (), registry=None, clock: Callable[[], float] = time.monotonic,
                 gone_keep_s: float = GONE_KEEP_S) -> None:
        self.static = list(dict.fromkeys(a for a in addrs if a))
        self.registry = registry           # a started RegistryView, or None
        self._clock = clock
        self.gone_keep_s = gone_keep_s
        self._seen: set[str] = set()
        self._gone: dict[str, tuple[float, dict]] = {}
        self._heartbeats: dict[str, dict] = {}

    def _refresh(self) -> None:
        if self.registry is None:
            return
        now = self._clock()
        current = set(self.registry.workers)
        for addr in self._seen - current:
            if addr not in self._gone:
                self._gone[addr] = (now, dict(self._heartbeats.get(addr, {})))
        for addr in current:
            self._gone.pop(addr, None)
        for addr, (t, _hb) in list(self._gone.items()):
            if now - t > self.gone_keep_s:
                del self._gone[addr]
        self._heartbeats = {a: w.heartbeat for a, w in self.registry.workers.items()}
        self._seen = current

    def workers(self) -> list[dict[str, Any]]:
        """One entry per worker: {addr, gone, heartbeat}, sorted by address."""
        self._refresh()
        out: list[dict[str, Any]] = [{"addr": a, "gone": False, "heartbeat": {}} for a in self.static]
        if self.registry is not None:
            listed = set(self.static)
            out += [{"addr": a, "gone": False, "heartbeat": dict(w.heartbeat)}
                    for a, w in self.registry.workers.items() if a not in listed]
            out += [{"addr": a, "gone": True, "heartbeat": hb} for a, (_t, hb) in self._gone.items()
                    if a not in listed]
        return sorted(out, key=lambda w: w["addr"])

    def addresses(self) -> list[str]:
        """The workers that can be dialled (gone ones excluded)."""
        return [w["addr"] for w in self.workers() if not w["gone"]]

    def known(self, addr: str) -> bool:
        return any(w["addr"] == addr for w in self.workers())

    def etcd_note(self) -> str:
        if self.registry is None:
            return ""
        if not self.registry.connected:
            return f"etcd unreachable, showing the last known fleet ({self.registry.last_error or 'no answer yet'})"
        return ""


def heartbeat_row(w: dict[str, Any]) -> dict[str, Any]:
    """A fleet row from the registry alone (what a tenant sees, and a worker that did not answer)."""
    hb = w["heartbeat"]

    def num(k: str) -> int | None:
        v = hb.get(k)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    total, free = num("taskSlots"), num("freeSlots")
    if w["gone"]:
        state = "gone"
    elif not hb:
        state = "unknown"
    else:
        state = "draining" if hb.get("draining") is True else ("ready" if hb.get("ready") is True else "not ready")
    return {"addr": w["addr"], "state": state, "version": str(hb.get("version", "")),
            "tls": str(hb.get("tls", "")), "auth": str(hb.get("authMode", "")),
            "slots": {"total": total, "used": None if total is None or free is None else total - free},
            "executors_healthy": num("executorsHealthy"), "executors_total": num("executorsTotal"),
            "executor_restarts": None, "tasks_by_phase": None, "tasks_per_s": None, "calls_per_s": None,
            "spark_tasks": [], "spark_calls": [], "error": ""}


class StatusPoller:
    def __init__(self, source: FleetSource, pool: ClientPool, token: str, *, clock: Callable[[], float],
                 interval_s: float = POLL_INTERVAL_S, timeout_s: float = POLL_TIMEOUT_S,
                 linger_s: float = LINGER_S) -> None:
        self.source = source
        self.pool = pool
        self.token = token
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.linger_s = linger_s
        self._clock = clock
        self.history: dict[str, WorkerHistory] = {}
        self.last: dict[str, tuple[Any, str]] = {}        # addr -> (pb.WorkerStatus or None, error)
        self.reads = 0
        self.updated = asyncio.Event()
        self._asked = clock()
        self._task: asyncio.Task | None = None

    def ask(self) -> None:
        """A page wants the status: keep polling (start if stopped)."""
        self._asked = self._clock()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping either way
                pass

    async def wait_read(self, timeout: float) -> bool:
        """Wait for the next round of reads (True) or ``timeout``."""
        ev = self.updated
        try:
            await asyncio.wait_for(ev.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def _run(self) -> None:
        while self._clock() - self._asked <= self.linger_s:
            started = self._clock()
            addrs = self.source.addresses()
            answers = await asyncio.gather(*(self._one(a) for a in addrs))
            for addr, ans in zip(addrs, answers):
                self.last[addr] = ans
                if ans[0] is not None:
                    self.history.setdefault(addr, WorkerHistory()).add(ans[0])
            for addr in list(self.history):
                if addr not in addrs and not self.source.known(addr):
                    self.history.pop(addr, None)
                    self.last.pop(addr, None)
            self.reads += 1
            ev, self.updated = self.updated, asyncio.Event()
            ev.set()
            await asyncio.sleep(max(0.0, self.interval_s - (self._clock() - started)))

    async def _one(self, addr: str) -> tuple[Any, str]:
        try:
            c = await asyncio.wait_for(self.pool.get(self.token, addr), self.timeout_s)
            return await c.status(timeout_s=self.timeout_s), ""
        except asyncio.TimeoutError:
            return None, f"no answer within {self.timeout_s:g}s"
        except BlockxError as exc:
            return None, f"{exc.code.name}: {exc.message}"
        except Exception as exc:  # noqa: BLE001 - one worker's trouble is its row, not the page's
            return None, f"{type(exc).__name__}: {exc}"

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for w in self.source.workers():
            row = heartbeat_row(w)
            st, err = self.last.get(w["addr"], (None, ""))
            if st is not None and not w["gone"]:
                s = status_row(st)
                row.update({"state": "draining" if s["draining"] else ("ready" if s["ready"] else "not ready"),
                            "version": s["version"],
                            "slots": {"total": s["slots"]["total"], "used": s["slots"]["total"] - s["slots"]["free"],
                                      "running": s["slots"]["running"], "reserved": s["slots"]["reserved"]},
                            "tasks_by_phase": s["tasks_by_phase"], "executors_healthy": s["executors_healthy"],
                            "executors_total": s["executors_total"], "executor_restarts": s["executor_restarts"],
                            "uptime_ms": s["uptime_ms"]})
                h = self.history.get(w["addr"])
                if h is not None and h.rates is not None:
                    row["tasks_per_s"], row["calls_per_s"] = h.rates
                    row["spark_tasks"], row["spark_calls"] = list(h.tasks), list(h.calls)
            elif not w["gone"]:
                row["error"] = err
                if err and row["state"] in ("unknown", "ready", "not ready"):
                    row["state"] = "unreachable"
            out.append(row)
        return out


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def add(key: str, sub: str | None = None) -> int:
        n = 0
        for r in rows:
            v = r.get(key) if sub is None else (r.get(key) or {}).get(sub)
            n += v if isinstance(v, int) else 0
        return n
    phases: dict[str, int] = {}
    for r in rows:
        for p, n in (r.get("tasks_by_phase") or {}).items():
            phases[p] = phases.get(p, 0) + n
    return {"workers": sum(1 for r in rows if r["state"] != "gone"),
            "ready": sum(1 for r in rows if r["state"] == "ready"),
            "slots_used": add("slots", "used"), "slots_total": add("slots", "total"),
            "tasks_by_phase": phases, "executors_healthy": add("executors_healthy"),
            "executors_total": add("executors_total"),
            "tasks_per_s": round(sum(r["tasks_per_s"] or 0 for r in rows), 3),
            "calls_per_s": round(sum(r["calls_per_s"] or 0 for r in rows), 3)}
