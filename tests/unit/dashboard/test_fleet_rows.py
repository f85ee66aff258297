"""The fleet rows: from heartbeats (what a tenant sees), from GetWorkerStatus reads
(admin), the rates between reads, the gone workers, and the totals."""
from __future__ import annotations

import json

from blockx.client.registry import WorkerInfo
from blockx.dashboard.fleet import FleetSource, heartbeat_row, totals
from blockx.dashboard.history import WorkerHistory
from blockx.dashboard.views import status_row
from blockx.worker.v1 import worker_pb2 as pb


class _Registry:
    def __init__(self) -> None:
        self.workers: dict[str, WorkerInfo] = {}
        self.connected = True
        self.last_error = None

    def put(self, addr: str, **hb) -> None:
        self.workers[addr] = WorkerInfo.parse(addr, json.dumps(hb).encode(), 1, 0.0)


def test_registry_workers_and_gone_ones_kept_a_while():
    now = [0.0]
    reg = _Registry()
    reg.put("a:1", ready=True, taskSlots=4, freeSlots=3, executorsHealthy=2, executorsTotal=2, tls="off",
            authMode="token", version="9")
    reg.put("b:1", ready=True, draining=True, taskSlots=4, freeSlots=4)
    src = FleetSource(registry=reg, clock=lambda: now[0], gone_keep_s=30)
    rows = [heartbeat_row(w) for w in src.workers()]
    assert [(r["addr"], r["state"]) for r in rows] == [("a:1", "ready"), ("b:1", "draining")]
    assert rows[0]["slots"] == {"total": 4, "used": 1} and rows[0]["auth"] == "token"
    del reg.workers["b:1"]
    now[0] = 10.0
    assert [(heartbeat_row(w)["state"]) for w in src.workers()] == ["ready", "gone"]
    assert src.known("b:1") and src.addresses() == ["a:1"]          # listed, never dialled
    now[0] = 41.0
    assert [w["addr"] for w in src.workers()] == ["a:1"] and not src.known("b:1")
    assert not src.known("evil:1")


def test_a_fixed_list_and_a_tenants_row():
    src = FleetSource(addrs=["x:1", "x:1", "y:2"])
    assert src.addresses() == ["x:1", "y:2"]
    row = heartbeat_row(src.workers()[0])
    assert row["state"] == "unknown" and row["slots"] == {"total": None, "used": None}


def _status(now_ms: int, succeeded: int, calls: int, started: int = 1) -> pb.WorkerStatus:
    st = pb.WorkerStatus(version="1.2", now_ms=now_ms, started_at_ms=started, ready=True,
                         slots=pb.SlotCounts(total=8, free=5, running=3))
    st.tasks_by_phase["CALLS"] = 3
    st.executors.add(executor_id="exec-0", healthy=True, restarts=2)
    st.executors.add(executor_id="exec-1", healthy=False, restarts=1)
    st.counters.tasks_succeeded = succeeded
    st.counters.calls_completed = calls
    return st


def test_status_row_and_rates_between_reads():
    r = status_row(_status(1000, 0, 0))
    assert r["executors_healthy"] == 1 and r["executors_total"] == 2 and r["executor_restarts"] == 3
    assert r["tasks_by_phase"] == {"PREPARING": 0, "BUILDER": 0, "CALLS": 3, "PLUGIN": 0}
    h = WorkerHistory(points=3)
    assert h.add(_status(1000, 0, 0)) is None
    assert h.add(_status(2000, 5, 50)) == (5.0, 50.0)
    assert h.add(_status(2000, 9, 90)) is None                   # the clock did not move
    assert h.add(_status(4000, 9, 90)) == (0.0, 0.0)
    assert h.add(_status(5000, 0, 0, started=2)) is None         # a restarted worker starts over
    assert h.add(_status(6000, 1, 1, started=2)) == (1.0, 1.0)
    assert list(h.tasks) == [5.0, 0.0, 1.0] and h.rates == (1.0, 1.0)


def test_totals():
    rows = [{"state": "ready", "slots": {"total": 8, "used": 3}, "executors_healthy": 2, "executors_total": 2,
             "tasks_by_phase": {"CALLS": 3}, "tasks_per_s": 1.5, "calls_per_s": 10.0},
            {"state": "gone", "slots": {"total": None, "used": None}, "executors_healthy": None,
             "executors_total": None, "tasks_by_phase": None, "tasks_per_s": None, "calls_per_s": None}]
    t = totals(rows)
    assert (t["workers"], t["ready"], t["slots_used"], t["slots_total"]) == (1, 1, 3, 8)
    assert t["tasks_by_phase"] == {"CALLS": 3} and t["tasks_per_s"] == 1.5
