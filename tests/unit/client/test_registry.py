"""WorkerInfo from a heartbeat value."""
import orjson

from blockx.client.registry import WorkerInfo


def test_heartbeat_fields():
    hb = {"workerAddr": "10.0.0.1:8081", "ready": True, "draining": False, "freeSlots": 3, "taskSlots": 8,
          "executorsHealthy": 2, "executorsTotal": 4, "updatedAtMs": 1_000}
    info = WorkerInfo.parse("10.0.0.1:8081", orjson.dumps(hb), 42, 5.0)
    assert (info.addr, info.ready, info.draining, info.free_slots, info.task_slots, info.executors_healthy,
            info.executors_total, info.updated_at_ms, info.revision) == ("10.0.0.1:8081", True, False, 3, 8, 2, 4,
                                                                          1_000, 42)
    assert info.placeable and info.heartbeat_age_ms(1_250) == 250


def test_a_garbled_value_is_listed_but_never_placeable():
    for raw in (b"not json", b"[1, 2]", orjson.dumps({"ready": "yes", "freeSlots": "many"})):
        info = WorkerInfo.parse("h:1", raw, 1, 0.0)
        assert info.addr == "h:1" and not info.placeable and info.free_slots == 0
    assert WorkerInfo.parse("h:1", orjson.dumps({"ready": True, "draining": True}), 1, 0.0).placeable is False
