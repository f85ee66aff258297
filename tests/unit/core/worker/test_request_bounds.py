"""WorkerCore: the size bounds of a request (task id, slot id, TTL, payload,
ResultHandler config, instance id, plugin names), at their exact edges. A refused
request names the field, its size, the limit and the setting, never echoes a long
value whole, and leaves the core unchanged."""
import pytest

from blockx.core import errors
from blockx.core.config import Config, ConfigError
from blockx.core.errors import WorkerError
from blockx.core.types import FunctionCall, ResultHandler, SlotState, TaskState
from blockx.core.worker.requests import (MAX_PLUGIN_NAME_BYTES, MAX_SLOT_ID_BYTES, MAX_TASK_ID_BYTES,
                                         SHOWN_CHARS, utf8_size)

from tests.unit.core.worker.test_support import check_invariants, make, req


def refused(fn, *args):
    with pytest.raises(WorkerError) as ei:
        fn(*args)
    assert ei.value.code == errors.INVALID_ARGUMENT, ei.value
    return ei.value.message


def untouched(w):
    check_invariants(w)
    assert all(s.state is SlotState.FREE for s in w.slots)
    assert w.get_index_entry("x") is None


# ---- task ids ---------------------------------------------------------------------


def test_the_limits_are_the_documented_numbers():
    assert (MAX_TASK_ID_BYTES, MAX_SLOT_ID_BYTES, MAX_PLUGIN_NAME_BYTES, SHOWN_CHARS) == (256, 64, 128, 32)
    c = Config()
    assert (c.max_slot_ttl_ms, c.max_payload_bytes, c.max_result_handler_config_bytes,
            c.max_instance_id_bytes) == (600_000, 16 * 1024 * 1024, 1024 * 1024, 256)


@pytest.mark.parametrize("task_id", ["a" * 256, "é" * 128, "\U0001F600" * 64, "x"])
def test_a_task_id_of_at_most_256_utf8_bytes_is_accepted_everywhere(task_id):
    w = make(task_slots=2)
    assert w.handle_request_task_slot(task_id, 0, 0).snapshot.state is TaskState.ALLOCATED
    assert w.handle_get_task_result(task_id).snapshot.task_id == task_id
    assert w.handle_submit_task(req(task_id, "slot-0"), 1).snapshot.state is TaskState.RUNNING
    check_invariants(w)


@pytest.mark.parametrize("task_id, size", [("a" * 257, 257), ("é" * 128 + "a", 257),
                                           ("\U0001F600" * 65, 260), ("é" * 200, 400),
                                           ("a" * (1 << 20), 1 << 20)])
def test_a_task_id_over_256_bytes_is_refused_by_every_request_naming_size_and_limit(task_id, size):
    w = make(task_slots=2)
    for fn, args in ((w.handle_request_task_slot, (task_id, 0, 0)),
                     (w.handle_submit_task, (req(task_id), 0)),
                     (w.handle_get_task_result, (task_id,))):
        msg = refused(fn, *args)
        assert msg.startswith(f"task_id is {size} bytes, over the limit of 256 bytes (UTF-8) of a task id: ")
        assert len(msg) < 300, len(msg)                       # never the id whole
        assert task_id[:SHOWN_CHARS] in msg and task_id[:SHOWN_CHARS + 1] not in msg
    untouched(w)


def test_an_empty_task_id_is_still_refused():
    w = make()
    assert refused(w.handle_request_task_slot, "", 0, 0).startswith("task_id is required")
    assert refused(w.handle_get_task_result, "").startswith("task_id is required")


def test_utf8_size_is_exact_past_the_limit_and_zero_within_it():
    assert utf8_size("a" * 64, 256) == 0 and utf8_size("\U0001F600" * 64, 256) == 0
    assert utf8_size("a" * 256, 256) == 0 and utf8_size("a" * 257, 256) == 257
    assert utf8_size("é" * 129, 256) == 258 and utf8_size("é" * 300, 256) == 600
    assert utf8_size("\ud800" * 100, 256) == 300              # a lone surrogate does not raise


# ---- slot TTL ----------------------------------------------------------------------


def test_a_slot_ttl_up_to_max_slot_ttl_ms_is_granted_for_exactly_that_long():
    w = make(task_slots=1)
    w.handle_request_task_slot("t", 600_000, 1_000)
    assert w.slots[0].lease_expires_at_ms == 601_000
    w2 = make(task_slots=1, max_slot_ttl_ms=50_000)
    w2.handle_request_task_slot("t", 50_000, 0)
    assert w2.slots[0].lease_expires_at_ms == 50_000


def test_a_year_long_ttl_is_refused_naming_max_slot_ttl_ms():
    w = make(task_slots=1)
    year = 365 * 24 * 3600 * 1000
    msg = refused(w.handle_request_task_slot, "x", year, 0)
    assert msg.startswith(f"ttl_ms {year} exceeds the longest slot reservation this worker grants, "
                          "600000 ms (worker.maxSlotTtlMs, MAX_SLOT_TTL_MS)")
    assert refused(w.handle_request_task_slot, "x", 600_001, 0).startswith("ttl_ms 600001 exceeds")
    assert refused(w.handle_request_task_slot, "x", 2**63 - 1, 0).startswith(f"ttl_ms {2**63 - 1} exceeds")
    untouched(w)


def test_the_default_ttl_may_not_exceed_the_cap():
    with pytest.raises(ConfigError) as ei:
        Config(default_ttl_ms=10_001, max_slot_ttl_ms=10_000).validate()
    assert "defaultTTLMs (default_ttl_ms) (10001) must not exceed maxSlotTtlMs (max_slot_ttl_ms) (10000)" \
        in str(ei.value)
    with pytest.raises(ConfigError):
        Config(max_slot_ttl_ms=0).validate()
    Config(default_ttl_ms=10_000, max_slot_ttl_ms=10_000).validate()


# ---- SubmitTask fields -------------------------------------------------------------


def test_payload_config_and_instance_id_at_their_caps_are_accepted():
    w = make(task_slots=3, max_payload_bytes=100, max_result_handler_config_bytes=50, max_instance_id_bytes=10)
    a = w.handle_submit_task(req("a", function_call=FunctionCall("callList", b"p" * 100),
                                 result_handler=ResultHandler("log", b"c" * 50), instance_id="i" * 10), 0)
    b = w.handle_submit_task(req("b", instance_id="é" * 5), 0)
    check_invariants(w)
    assert a.snapshot.state is TaskState.RUNNING and b.snapshot.state is TaskState.RUNNING
    assert w.get_task_context("a").instance_id == "i" * 10


@pytest.mark.parametrize("kw, expected", [
    ({"function_call": FunctionCall("callList", b"p" * 101)},
     "task.function_call.payload is 101 bytes, over the limit of 100 bytes "
     "(worker.maxPayloadBytes, MAX_PAYLOAD_BYTES); send less, or raise worker.maxPayloadBytes, "
     "MAX_PAYLOAD_BYTES on the worker"),
    ({"result_handler": ResultHandler("log", b"c" * 51)},
     "task.result_handler.config is 51 bytes, over the limit of 50 bytes "
     "(worker.maxResultHandlerConfigBytes, MAX_RESULT_HANDLER_CONFIG_BYTES)"),
    ({"result_handler": ResultHandler("", b"c" * 51)}, "task.result_handler.config is 51 bytes"),
    ({"instance_id": "i" * 11},
     "task.instance_id is 11 bytes, over the limit of 10 bytes (worker.maxInstanceIdBytes, MAX_INSTANCE_ID_BYTES)"),
    ({"instance_id": "é" * 6}, "task.instance_id is 12 bytes, over the limit of 10 bytes"),
    ({"function_call": FunctionCall("f" * 129)},
     "task.function_call.type is 129 bytes, over the limit of 128 bytes of a plugin name: 'ffff"),
    ({"result_handler": ResultHandler("w" * 129)},
     "task.result_handler.type is 129 bytes, over the limit of 128 bytes of a plugin name"),
])
def test_submit_fields_over_their_caps_are_refused_naming_field_size_and_setting(kw, expected):
    w = make(task_slots=1, max_payload_bytes=100, max_result_handler_config_bytes=50, max_instance_id_bytes=10)
    msg = refused(w.handle_submit_task, req("x", **kw), 0)
    assert msg.startswith(expected), msg
    assert len(msg) < 300
    untouched(w)


def test_a_huge_slot_id_is_refused_without_echoing_it():
    w = make(task_slots=1)
    sid = "slot-" + "9" * 100_000
    msg = refused(w.handle_submit_task, req("x", sid), 0)
    assert msg.startswith("slot_id is 100005 bytes, over the limit of 64 bytes: 'slot-999")
    assert len(msg) < 300
    untouched(w)


def test_an_idempotent_resubmit_is_answered_before_the_bounds():
    """A repeat of an accepted task answers its snapshot, as before: the bounds only
    judge what a new task asks for."""
    w = make(task_slots=1, max_payload_bytes=100)
    w.handle_submit_task(req("x"), 0)
    r = w.handle_submit_task(req("x", function_call=FunctionCall("callList", b"p" * 101)), 1)
    assert r.snapshot.state is TaskState.RUNNING and not r.applied
