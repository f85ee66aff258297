"""Validation of RequestTaskSlot / SubmitTask input, and resolution of defaults.

Rules: every check of a field raises InvalidArgumentError with the field as the
client wrote it (proto names), the bad value and the accepted range; the check
of a named slot against the task's reservation raises InvalidSlot or
SlotUncertain. Nothing here changes WorkerCore state, so a rejected request
leaves the core unchanged.
A value of 0 means "use the Config default" wherever proto3 cannot tell unset
from zero (task_timeout_ms, call_retry_policy fields, ttl_ms).

Sizes are bounded here too: a task id is at most MAX_TASK_ID_BYTES of UTF-8, a
slot id MAX_SLOT_ID_BYTES, a builder or plugin name MAX_PLUGIN_NAME_BYTES; the
payload, the ResultHandler config, the instance id and ttl_ms are capped by
Config settings. A refusal names the field, its size and the limit (with the
setting that raises it), and shows at most SHOWN_CHARS characters of a value
that is too long, so a huge id never reaches a message or a log line whole.
These checks come first and cost a len() each on the common path.
"""
from __future__ import annotations

from typing import Any

from blockx.core.config import MAX_RETRY_JITTER_PERCENT, Config
from blockx.core.errors import InvalidArgumentError, InvalidSlotError, SlotUncertainError
from blockx.core.types import (CONTINUE, FAST_FAIL, CallRetryPolicy, FunctionCall, ResultHandler,
                    SubmitTaskRequest, TaskIndexEntry)

# Accepted spellings of CallFailurePolicy: our names, the proto enum names and numbers.
_POLICIES: dict[Any, str] = {
    "": FAST_FAIL, FAST_FAIL: FAST_FAIL, CONTINUE: CONTINUE,
    "CALL_FAILURE_POLICY_UNSPECIFIED": FAST_FAIL, "CALL_FAILURE_POLICY_FAST_FAIL": FAST_FAIL,
    "CALL_FAILURE_POLICY_CONTINUE": CONTINUE, 0: FAST_FAIL, 1: FAST_FAIL, 2: CONTINUE,
    None: FAST_FAIL,
}

MAX_TASK_ID_BYTES = 256
MAX_SLOT_ID_BYTES = 64
MAX_PLUGIN_NAME_BYTES = 128
SHOWN_CHARS = 32                 # of a value too long to echo whole


def shown(value: str) -> str:
    """``value`` for a message: its repr, cut after SHOWN_CHARS characters."""
    if len(value) <= SHOWN_CHARS:
        return repr(value)
    return f"{value[:SHOWN_CHARS]!r}... ({len(value)} characters)"


def utf8_size(value: str, limit: int) -> int:
    """The UTF-8 size of ``value`` when it exceeds ``limit`` bytes, else 0. A
    character is at most 4 bytes, so a short string is never encoded."""
    n = len(value)
    if n * 4 <= limit:
        return 0
    if n > limit:
        return n if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
    b = len(value.encode("utf-8", "surrogatepass"))
    return b if b > limit else 0


def require_task_id(task_id: str, field: str = "task_id") -> None:
    if not task_id:
        raise InvalidArgumentError(f"{field} is required (a non-empty id chosen by the caller, "
                                   "unique per task; it is the idempotency key)")
    if len(task_id) * 4 > MAX_TASK_ID_BYTES:
        n = utf8_size(task_id, MAX_TASK_ID_BYTES)
        if n:
            raise InvalidArgumentError(
                f"{field} is {n} bytes, over the limit of {MAX_TASK_ID_BYTES} bytes (UTF-8) of a task id: "
                f"{shown(task_id)}; use a shorter id (e.g. a UUID or a hash of the long one)")


def _require_size(field: str, n: int, limit: int, setting: str) -> None:
    if n > limit:
        raise InvalidArgumentError(f"{field} is {n} bytes, over the limit of {limit} bytes ({setting}); "
                                   f"send less, or raise {setting} on the worker")


def _require_name(field: str, name: str) -> None:
    n = utf8_size(name, MAX_PLUGIN_NAME_BYTES)
    if n:
        raise InvalidArgumentError(f"{field} is {n} bytes, over the limit of {MAX_PLUGIN_NAME_BYTES} "
                                   f"bytes of a plugin name: {shown(name)}")


def resolve_ttl(ttl_ms: int, cfg: Config) -> int:
    if ttl_ms < 0:
        raise InvalidArgumentError(
            f"ttl_ms {ttl_ms} is negative; use 0 for the default slot TTL "
            f"({cfg.default_ttl_ms} ms) or a positive number of milliseconds")
    if ttl_ms > cfg.max_slot_ttl_ms:
        raise InvalidArgumentError(
            f"ttl_ms {ttl_ms} exceeds the longest slot reservation this worker grants, "
            f"{cfg.max_slot_ttl_ms} ms (worker.maxSlotTtlMs, MAX_SLOT_TTL_MS); ask for a shorter TTL "
            "and submit within it, or raise worker.maxSlotTtlMs")
    return ttl_ms or cfg.default_ttl_ms


# What a valid SubmitTask asks for, defaults applied: (function_call, result_handler,
# timeout_ms, call_failure_policy, call_retry_policy, instance_id). A tuple, not an
# object: it is unpacked at once on the submit path, where a Python __init__ costs.
ResolvedSubmit = tuple[FunctionCall, ResultHandler | None, int, str, CallRetryPolicy, str]


def resolve_submit(req: SubmitTaskRequest, cfg: Config) -> ResolvedSubmit:
    fc = req.function_call
    if fc is None or not fc.type:
        raise InvalidArgumentError(
            "task.function_call.type is required: name the call builder to run (e.g. \"callList\")")
    if len(fc.type) * 4 > MAX_PLUGIN_NAME_BYTES:
        _require_name("task.function_call.type", fc.type)
    if len(fc.payload) > cfg.max_payload_bytes:
        _require_size("task.function_call.payload", len(fc.payload), cfg.max_payload_bytes,
                      "worker.maxPayloadBytes, MAX_PAYLOAD_BYTES")

    rh = req.result_handler
    if rh is not None:
        if len(rh.config) > cfg.max_result_handler_config_bytes:
            _require_size("task.result_handler.config", len(rh.config), cfg.max_result_handler_config_bytes,
                          "worker.maxResultHandlerConfigBytes, MAX_RESULT_HANDLER_CONFIG_BYTES")
        if not rh.type:
            if rh.config:
                raise InvalidArgumentError(
                    "task.result_handler.type is required when result_handler.config is set: "
                    "name the writer plugin, or omit result_handler to run no plugin")
            rh = None
        elif len(rh.type) * 4 > MAX_PLUGIN_NAME_BYTES:
            _require_name("task.result_handler.type", rh.type)

    iid = req.instance_id
    if len(iid) * 4 > cfg.max_instance_id_bytes:
        n = utf8_size(iid, cfg.max_instance_id_bytes)
        if n:
            _require_size("task.instance_id", n, cfg.max_instance_id_bytes,
                          "worker.maxInstanceIdBytes, MAX_INSTANCE_ID_BYTES")
    sid = req.slot_id
    if len(sid) > MAX_SLOT_ID_BYTES // 4:
        n = utf8_size(sid, MAX_SLOT_ID_BYTES)
        if n:
            raise InvalidArgumentError(f"slot_id is {n} bytes, over the limit of {MAX_SLOT_ID_BYTES} bytes: "
                                       f"{shown(sid)} is no slot id (RequestTaskSlot returns them); "
                                       "omit slot_id to reserve a slot inline")

    t = req.task_timeout_ms
    if t < 0:
        raise InvalidArgumentError(
            f"task_timeout_ms {t} is negative; use 0 for the default task deadline "
            f"({cfg.task_deadline_ms} ms) or a positive number of milliseconds")
    if t > cfg.max_task_timeout_ms:
        raise InvalidArgumentError(f"task_timeout_ms {t} exceeds maxTaskTimeoutMs {cfg.max_task_timeout_ms}")

    try:
        policy = _POLICIES[req.call_failure_policy]
    except (KeyError, TypeError):
        raise InvalidArgumentError(
            f"call_failure_policy {req.call_failure_policy!r} is not one of FAST_FAIL, CONTINUE") from None

    rp = req.call_retry_policy
    if rp is None:
        retry = CallRetryPolicy(cfg.default_max_attempts, cfg.default_base_backoff_ms,
                                cfg.default_retry_jitter_percent)
    else:
        if rp.max_attempts < 0:
            raise InvalidArgumentError(
                f"call_retry_policy.max_attempts {rp.max_attempts} is negative; use 0 for the "
                f"default ({cfg.default_max_attempts}) or >= 1 (1 means no retry)")
        if rp.base_backoff_ms < 0:
            raise InvalidArgumentError(
                f"call_retry_policy.base_backoff_ms {rp.base_backoff_ms} is negative; use 0 for "
                f"the default ({cfg.default_base_backoff_ms} ms) or a positive number of milliseconds")
        if not 0 <= rp.jitter_percent <= MAX_RETRY_JITTER_PERCENT:
            raise InvalidArgumentError(
                f"call_retry_policy.jitter_percent {rp.jitter_percent} is outside 0..{MAX_RETRY_JITTER_PERCENT}: "
                f"a retry adds at most {MAX_RETRY_JITTER_PERCENT}% jitter to its backoff; use 0 for the "
                f"worker default ({cfg.default_retry_jitter_percent})")
        retry = CallRetryPolicy(rp.max_attempts or cfg.default_max_attempts,
                                rp.base_backoff_ms or cfg.default_base_backoff_ms,
                                rp.jitter_percent or cfg.default_retry_jitter_percent)

    return fc, rh, t or cfg.task_deadline_ms, policy, retry, req.instance_id


def check_reserved_slot(task_id: str, slot_id: str, entry: TaskIndexEntry | None) -> None:
    """SubmitTask named ``slot_id``: it must be the live reservation of this task."""
    if entry is None:
        raise InvalidSlotError(
            f"{slot_id} is not reserved for task {task_id!r}; call RequestTaskSlot first, "
            "or submit without slot_id to reserve a slot inline")
    if entry.lease_lost_at_ms >= 0:
        if entry.slot_id == slot_id:
            raise SlotUncertainError(
                f"the reservation of {slot_id} for task {task_id!r} expired at "
                f"{entry.lease_lost_at_ms} ms and the slot was reclaimed; request a new slot "
                "(RequestTaskSlot) and submit again, within its TTL")
        raise InvalidSlotError(
            f"{slot_id} is not reserved for task {task_id!r} (its reservation of "
            f"{entry.slot_id} expired at {entry.lease_lost_at_ms} ms); request a new slot")
    if entry.slot_id != slot_id:
        raise InvalidSlotError(
            f"{slot_id} is not reserved for task {task_id!r}, which holds {entry.slot_id}; "
            f"submit with slot_id {entry.slot_id!r}")
