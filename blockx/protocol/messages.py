"""UDS messages between the Worker and its Executors (docs/architecture.md, "Frames on the executor socket").

Envelope: {"messageType": str, "callId": str, "requestId": str, "payload": {...}}.
The constructors below are used on hot paths: they build the envelope dict
directly, always with every key (so both sides see one shape), and do no
validation. Values may be orjson.Fragment (pre-encoded JSON spliced verbatim,
e.g. call args or outputs).

The receiving side calls `validate(envelope)` (or `validate_payload`) before it
acts on a message: it checks the message type is one this side accepts, that
every required payload key is present with the right JSON type, fills the
documented defaults of optional keys in place, and raises ProtocolError naming
the message and the key. A peer's malformed message is thereby rejected without
an AttributeError/KeyError deep in a handler.

Required / optional payload keys (optional ones with their defaults):
  ExecuteCall   taskId functionId functionCodeDigest args(array) attemptSeq;
                entrySelector="main" parentCallId="" callBudgetMs=0 (0 = unlimited)
  ResumeCall    resumeKind, and exactly one of result (any JSON) / error
                {errorKind, errorMessage, retryable}; budgetUsedMs=0.
                function_code results are {"source", "functionCodeDigest"}.
                Envelope requestId must echo the CallWaiting's requestId.
  CancelCall    attemptSeq; reason=""
  HeartbeatAck  (no payload)
  CallWaiting   taskId attemptSeq waitKind; requestId non-empty;
                io: backend request(any JSON; binary body in the sidecar);
                subcall: functionId args(array) grantedBudgetMs ancestry(array of str);
                function_code: functionId functionCodeDigest
  CallCompleted taskId attemptSeq output(any JSON) budgetUsedMs; startedAtMs=0 durationMs=0
  CallFailed    taskId attemptSeq errorKind retryable errorMessage;
                errorStack="" localVars={} budgetUsedMs=0
  Heartbeat     executorId pid seq runnableCount inflightCount availableContexts
                memoryBytes lastSchedulerActiveAtMs; runningCallId="" cpuUserMs=0
                cpuSystemMs=0 sentAtMs=0
Every message except Heartbeat and HeartbeatAck needs a non-empty callId.
Integers are JSON integers (booleans are rejected); unknown extra keys are kept.
"""

from __future__ import annotations

from typing import Any

from blockx._fast import load
from blockx._fast.errors import ProtocolError

# --- message types -----------------------------------------------------------------
EXECUTE_CALL = "ExecuteCall"
RESUME_CALL = "ResumeCall"
CANCEL_CALL = "CancelCall"
HEARTBEAT_ACK = "HeartbeatAck"
CALL_WAITING = "CallWaiting"
CALL_COMPLETED = "CallCompleted"
CALL_FAILED = "CallFailed"
HEARTBEAT = "Heartbeat"
# Negotiated, beyond the base protocol: an executor whose Heartbeat lists FEATURE_EXECUTE_CALL_BATCH
# in `features` may get several ExecuteCall envelopes, unchanged, in one frame
# {"messageType": "ExecuteCallBatch", "callId": "", "requestId": "", "payload": {"calls": [...]}}.
EXECUTE_CALL_BATCH = "ExecuteCallBatch"
FEATURE_EXECUTE_CALL_BATCH = "executeCallBatch"

WORKER_TO_EXECUTOR = frozenset({EXECUTE_CALL, EXECUTE_CALL_BATCH, RESUME_CALL, CANCEL_CALL,
                                HEARTBEAT_ACK})
EXECUTOR_TO_WORKER = frozenset({CALL_WAITING, CALL_COMPLETED, CALL_FAILED, HEARTBEAT})
ALL_MESSAGE_TYPES = WORKER_TO_EXECUTOR | EXECUTOR_TO_WORKER

# --- wait / resume kinds ----------------------------------------------------------
WAIT_IO = "io"
WAIT_SUBCALL = "subcall"
WAIT_FUNCTION_CODE = "function_code"
WAIT_KINDS = frozenset({WAIT_IO, WAIT_SUBCALL, WAIT_FUNCTION_CODE})
RESUME_KINDS = WAIT_KINDS

DEFAULT_ENTRY_SELECTOR = "main"

# --- errorKind values used across the system ---------------------------------------
USER_ERROR = "USER_ERROR"  # exception in user code, retryable=false
BUDGET_EXCEEDED = "BUDGET_EXCEEDED"  # false
CANCELLED = "CANCELLED"  # false
OUTPUT_NOT_JSON = "OUTPUT_NOT_JSON"  # false
FUNCTION_NOT_FOUND = "FUNCTION_NOT_FOUND"  # false: entrySelector missing / code fetch failed
EXECUTOR_LOST = "EXECUTOR_LOST"  # true
RESUME_SEND_FAILED = "RESUME_SEND_FAILED"  # true
OUTBOX_FULL = "OUTBOX_FULL"  # true
IO_ERROR = "IO_ERROR"  # per backend
SUBCALL_FAILED = "SUBCALL_FAILED"  # carries the child's retryable
# Whether a failure of this kind may be retried, where the kind alone decides it.
DEFAULT_RETRYABLE = {USER_ERROR: False, BUDGET_EXCEEDED: False, CANCELLED: False,
                     OUTPUT_NOT_JSON: False, FUNCTION_NOT_FOUND: False, EXECUTOR_LOST: True,
                     RESUME_SEND_FAILED: True, OUTBOX_FULL: True}


# --- constructors (hot path: no validation) -----------------------------------------
def execute_call(call_id: str, task_id: str, function_id: str, function_code_digest: str,
                 args: Any, attempt_seq: int, entry_selector: str = DEFAULT_ENTRY_SELECTOR,
                 parent_call_id: str = "", call_budget_ms: int = 0) -> dict:
    return {"messageType": EXECUTE_CALL, "callId": call_id, "requestId": "", "payload": {
        "taskId": task_id, "functionId": function_id,
        "functionCodeDigest": function_code_digest, "entrySelector": entry_selector,
        "args": args, "parentCallId": parent_call_id, "callBudgetMs": call_budget_ms,
        "attemptSeq": attempt_seq}}


def resume_call_result(call_id: str, request_id: str, resume_kind: str, result: Any,
                       budget_used_ms: int = 0) -> dict:
    """ResumeCall carrying a result (an IO binary body goes in the frame's sidecar)."""
    return {"messageType": RESUME_CALL, "callId": call_id, "requestId": request_id,
            "payload": {"resumeKind": resume_kind, "result": result,
                        "budgetUsedMs": budget_used_ms}}


def resume_call_error(call_id: str, request_id: str, resume_kind: str, error_kind: str,
                      error_message: str, retryable: bool, budget_used_ms: int = 0) -> dict:
    return {"messageType": RESUME_CALL, "callId": call_id, "requestId": request_id,
            "payload": {"resumeKind": resume_kind,
                        "error": {"errorKind": error_kind, "errorMessage": error_message,
                                  "retryable": retryable},
                        "budgetUsedMs": budget_used_ms}}


def resume_function_code(call_id: str, request_id: str, source: str,
                         function_code_digest: str) -> dict:
    """ResumeCall answering CallWaiting(waitKind=function_code)."""
    return {"messageType": RESUME_CALL, "callId": call_id, "requestId": request_id,
            "payload": {"resumeKind": WAIT_FUNCTION_CODE,
                        "result": {"source": source,
                                   "functionCodeDigest": function_code_digest},
                        "budgetUsedMs": 0}}


def cancel_call(call_id: str, attempt_seq: int, reason: str = "") -> dict:
    return {"messageType": CANCEL_CALL, "callId": call_id, "requestId": "",
            "payload": {"reason": reason, "attemptSeq": attempt_seq}}


def execute_call_batch(calls: list) -> dict:
    """Several ExecuteCall envelopes in one frame (only to an executor that
    advertised FEATURE_EXECUTE_CALL_BATCH)."""
    return {"messageType": EXECUTE_CALL_BATCH, "callId": "", "requestId": "",
            "payload": {"calls": calls}}


def execute_call_batch_items(payload: dict) -> list:
    """The validated ExecuteCall envelopes of a validated ExecuteCallBatch
    payload, in order. Raises ProtocolError naming the first bad element: a batch
    is accepted whole or not at all."""
    calls = payload["calls"]
    for i, env in enumerate(calls):
        try:
            validate(env, _BATCH_ITEM)
        except ProtocolError as exc:
            raise ProtocolError(f"ExecuteCallBatch element {i}: {exc}") from None
    return calls


def heartbeat_ack() -> dict:
    return {"messageType": HEARTBEAT_ACK, "callId": "", "requestId": ""}


def call_waiting_io(call_id: str, request_id: str, task_id: str, attempt_seq: int,
                    backend: str, request: Any) -> dict:
    return {"messageType": CALL_WAITING, "callId": call_id, "requestId": request_id,
            "payload": {"taskId": task_id, "attemptSeq": attempt_seq, "waitKind": WAIT_IO,
                        "backend": backend, "request": request}}


def call_waiting_subcall(call_id: str, request_id: str, task_id: str, attempt_seq: int,
                         function_id: str, args: Any, granted_budget_ms: int,
                         ancestry: list) -> dict:
    return {"messageType": CALL_WAITING, "callId": call_id, "requestId": request_id,
            "payload": {"taskId": task_id, "attemptSeq": attempt_seq,
                        "waitKind": WAIT_SUBCALL, "functionId": function_id, "args": args,
                        "grantedBudgetMs": granted_budget_ms, "ancestry": ancestry}}


def call_waiting_function_code(call_id: str, request_id: str, task_id: str, attempt_seq: int,
                               function_id: str, function_code_digest: str) -> dict:
    return {"messageType": CALL_WAITING, "callId": call_id, "requestId": request_id,
            "payload": {"taskId": task_id, "attemptSeq": attempt_seq,
                        "waitKind": WAIT_FUNCTION_CODE, "functionId": function_id,
                        "functionCodeDigest": function_code_digest}}


def call_completed(call_id: str, task_id: str, attempt_seq: int, output: Any,
                   budget_used_ms: int, started_at_ms: int = 0, duration_ms: int = 0) -> dict:
    return {"messageType": CALL_COMPLETED, "callId": call_id, "requestId": "",
            "payload": {"taskId": task_id, "attemptSeq": attempt_seq, "output": output,
                        "budgetUsedMs": budget_used_ms, "startedAtMs": started_at_ms,
                        "durationMs": duration_ms}}


def call_failed(call_id: str, task_id: str, attempt_seq: int, error_kind: str,
                retryable: bool, error_message: str, error_stack: str = "",
                local_vars: dict | None = None, budget_used_ms: int = 0) -> dict:
    return {"messageType": CALL_FAILED, "callId": call_id, "requestId": "",
            "payload": {"taskId": task_id, "attemptSeq": attempt_seq, "errorKind": error_kind,
                        "retryable": retryable, "errorMessage": error_message,
                        "errorStack": error_stack,
                        "localVars": local_vars if local_vars is not None else {},
                        "budgetUsedMs": budget_used_ms}}


def heartbeat(executor_id: str, pid: int, seq: int, runnable_count: int, inflight_count: int,
              available_contexts: int, memory_bytes: int, last_scheduler_active_at_ms: int,
              running_call_id: str = "", cpu_user_ms: int = 0, cpu_system_ms: int = 0,
              sent_at_ms: int = 0) -> dict:
    return {"messageType": HEARTBEAT, "callId": "", "requestId": "", "payload": {
        "executorId": executor_id, "pid": pid, "seq": seq, "runnableCount": runnable_count,
        "inflightCount": inflight_count, "availableContexts": available_contexts,
        "memoryBytes": memory_bytes, "lastSchedulerActiveAtMs": last_scheduler_active_at_ms,
        "runningCallId": running_call_id, "cpuUserMs": cpu_user_ms,
        "cpuSystemMs": cpu_system_ms, "sentAtMs": sent_at_ms}}


# --- validation ---------------------------------------------------------------------
# Type tags: "str", "int" (not bool), "bool", "list", "dict", "any" (any JSON value).
_REQUIRED: dict[str, tuple[tuple[str, str], ...]] = {
    EXECUTE_CALL: (("taskId", "str"), ("functionId", "str"), ("functionCodeDigest", "str"),
                   ("args", "list"), ("attemptSeq", "int")),
    RESUME_CALL: (("resumeKind", "str"),),
    CANCEL_CALL: (("attemptSeq", "int"),),
    HEARTBEAT_ACK: (),
    CALL_WAITING: (("taskId", "str"), ("attemptSeq", "int"), ("waitKind", "str")),
    CALL_COMPLETED: (("taskId", "str"), ("attemptSeq", "int"), ("output", "any"),
                     ("budgetUsedMs", "int")),
    CALL_FAILED: (("taskId", "str"), ("attemptSeq", "int"), ("errorKind", "str"),
                  ("retryable", "bool"), ("errorMessage", "str")),
    HEARTBEAT: (("executorId", "str"), ("pid", "int"), ("seq", "int"), ("runnableCount", "int"),
                ("inflightCount", "int"), ("availableContexts", "int"), ("memoryBytes", "int"),
                ("lastSchedulerActiveAtMs", "int")),
}
_REQUIRED[EXECUTE_CALL_BATCH] = (("calls", "list"),)
_BATCH_ITEM = frozenset({EXECUTE_CALL})
_OPTIONAL: dict[str, tuple[tuple[str, str, Any], ...]] = {
    EXECUTE_CALL_BATCH: (),
    EXECUTE_CALL: (("entrySelector", "str", DEFAULT_ENTRY_SELECTOR), ("parentCallId", "str", ""),
                   ("callBudgetMs", "int", 0)),
    RESUME_CALL: (("budgetUsedMs", "int", 0),),
    CANCEL_CALL: (("reason", "str", ""),),
    HEARTBEAT_ACK: (),
    CALL_WAITING: (),
    CALL_COMPLETED: (("startedAtMs", "int", 0), ("durationMs", "int", 0)),
    CALL_FAILED: (("errorStack", "str", ""), ("localVars", "dict", None),
                  ("budgetUsedMs", "int", 0)),
    HEARTBEAT: (("runningCallId", "str", ""), ("cpuUserMs", "int", 0), ("cpuSystemMs", "int", 0),
                ("sentAtMs", "int", 0)),
}
_WAIT_KIND_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    WAIT_IO: (("backend", "str"), ("request", "any")),
    WAIT_SUBCALL: (("functionId", "str"), ("args", "list"), ("grantedBudgetMs", "int"),
                   ("ancestry", "list")),
    WAIT_FUNCTION_CODE: (("functionId", "str"), ("functionCodeDigest", "str")),
}
_ERROR_KEYS = (("errorKind", "str"), ("errorMessage", "str"), ("retryable", "bool"))
_FUNCTION_CODE_KEYS = (("source", "str"), ("functionCodeDigest", "str"))
_NEEDS_CALL_ID = frozenset({EXECUTE_CALL, RESUME_CALL, CANCEL_CALL, CALL_WAITING,
                            CALL_COMPLETED, CALL_FAILED})
_NEEDS_REQUEST_ID = frozenset({RESUME_CALL, CALL_WAITING})


def _type_ok(value: Any, tag: str) -> bool:
    if tag == "str":
        return type(value) is str
    if tag == "int":
        return type(value) is int
    if tag == "bool":
        return type(value) is bool
    if tag == "list":
        return type(value) is list
    if tag == "dict":
        return type(value) is dict
    return True


_TAG_NAMES = {"str": "a string", "int": "an integer", "bool": "a boolean", "list": "an array",
              "dict": "an object"}


def _json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    if type(value) is bool:
        return "boolean"
    if type(value) is int or type(value) is float:
        return "number"
    if type(value) is str:
        return "string"
    if type(value) is list:
        return "array"
    if type(value) is dict:
        return "object"
    return type(value).__name__


def _check_keys(where: str, obj: dict, keys: tuple) -> None:
    for key, tag in keys:
        try:
            value = obj[key]
        except KeyError:
            raise ProtocolError(f"{where} is missing required key {key!r}") from None
        if tag != "any" and not _type_ok(value, tag):
            raise ProtocolError(f"{where} key {key!r} must be {_TAG_NAMES[tag]}, "
                                f"got {_json_type_name(value)}")


def schema_keys(message_type: str, kind: str = "") -> frozenset[str]:
    """Every payload key the schema above names for `message_type` (required and
    optional; with `kind`, the keys of that CallWaiting waitKind, or of a
    ResumeCall: "result" or "error"). The constructors above and the codec's
    frame templates (blockx/_fast/codec) write exactly these keys; the tests
    hold them to it."""
    keys = {k for k, _ in _REQUIRED[message_type]} | {k for k, _, _ in _OPTIONAL[message_type]}
    if message_type == CALL_WAITING and kind:
        keys |= {k for k, _ in _WAIT_KIND_KEYS[kind]}
    elif message_type == RESUME_CALL and kind:
        keys.add(kind)
    return frozenset(keys)


def validate_payload(message_type: str, payload: Any) -> dict:
    """Check `payload` of a `message_type` message, fill optional defaults in
    place, and return it. Raises ProtocolError."""
    required = _REQUIRED.get(message_type)
    if required is None:
        raise ProtocolError(f"unknown messageType {message_type!r}")
    if payload is None and message_type == HEARTBEAT_ACK:
        return {}
    if type(payload) is not dict:
        raise ProtocolError(f"{message_type} payload must be an object, "
                            f"got {_json_type_name(payload)}")
    _check_keys(f"{message_type} payload", payload, required)
    for key, tag, default in _OPTIONAL[message_type]:
        value = payload.get(key)
        if value is None:
            payload[key] = {} if tag == "dict" else default
        elif not _type_ok(value, tag):
            raise ProtocolError(f"{message_type} payload key {key!r} must be {_TAG_NAMES[tag]}, "
                                f"got {_json_type_name(value)}")
    if message_type == CALL_WAITING:
        kind = payload["waitKind"]
        keys = _WAIT_KIND_KEYS.get(kind)
        if keys is None:
            raise ProtocolError(f"CallWaiting waitKind {kind!r} is not one of "
                                f"{sorted(WAIT_KINDS)}")
        _check_keys(f"CallWaiting({kind}) payload", payload, keys)
        if kind == WAIT_SUBCALL:
            for item in payload["ancestry"]:
                if type(item) is not str:
                    raise ProtocolError("CallWaiting(subcall) payload key 'ancestry' must be "
                                        "an array of call id strings")
    elif message_type == RESUME_CALL:
        kind = payload["resumeKind"]
        if kind not in RESUME_KINDS:
            raise ProtocolError(f"ResumeCall resumeKind {kind!r} is not one of "
                                f"{sorted(RESUME_KINDS)}")
        has_result = "result" in payload
        error = payload.get("error")
        if error is not None:
            if has_result:
                raise ProtocolError("ResumeCall payload carries both 'result' and 'error'")
            if type(error) is not dict:
                raise ProtocolError(f"ResumeCall payload key 'error' must be an object, "
                                    f"got {_json_type_name(error)}")
            _check_keys("ResumeCall error", error, _ERROR_KEYS)
        elif not has_result:
            raise ProtocolError("ResumeCall payload needs 'result' or 'error'")
        elif kind == WAIT_FUNCTION_CODE:
            result = payload["result"]
            if type(result) is not dict:
                raise ProtocolError("ResumeCall(function_code) result must be an object "
                                    "with 'source' and 'functionCodeDigest'")
            _check_keys("ResumeCall(function_code) result", result, _FUNCTION_CODE_KEYS)
    return payload


def validate(envelope: Any, accept: frozenset | None = None) -> dict:
    """Check a decoded envelope and its payload; return the payload (defaults
    filled). `accept` limits the message types this side takes, e.g.
    EXECUTOR_TO_WORKER on the Worker. Raises ProtocolError."""
    payload = _route_fast(envelope, accept)   # only the envelope's own type's fast path
    if payload is not None:
        return payload
    return _validate(envelope, accept)


# The fast paths of the frames of every call and round trip (CallCompleted,
# ExecuteCall, CallWaiting io / subcall, ResumeCall io / subcall with a result):
# compiled, with their pure-Python twin (blockx/_fast/framecheck*). Each returns
# the payload exactly as `_validate` would leave it, or None for anything unusual
# (the general path then names the problem).
_checks = load("framecheck").FrameChecks(EXECUTE_CALL, RESUME_CALL, CALL_WAITING, CALL_COMPLETED,
                                          WAIT_IO, WAIT_SUBCALL, DEFAULT_ENTRY_SELECTOR)
_wait_resume_fast = _checks.wait_resume
_execute_fast = _checks.execute
_route_fast = _checks.route


# validate()'s fast path alone, for a receiver's per-frame loop (the Worker's executor
# connection, the executor's scheduler): the payload, or None for "take validate()"
# (it names the problem, if any).
validate_fast = _route_fast

def _validate(envelope: Any, accept: frozenset | None = None) -> dict:
    if type(envelope) is not dict:
        raise ProtocolError(f"envelope must be an object, got {_json_type_name(envelope)}")
    mt = envelope.get("messageType")
    if type(mt) is not str or mt not in ALL_MESSAGE_TYPES:
        raise ProtocolError(f"unknown messageType {mt!r}")
    if accept is not None and mt not in accept:
        raise ProtocolError(f"messageType {mt!r} is not accepted in this direction")
    call_id = envelope.get("callId")
    if call_id is None:
        call_id = envelope["callId"] = ""
    elif type(call_id) is not str:
        raise ProtocolError(f"{mt} callId must be a string, got {_json_type_name(call_id)}")
    request_id = envelope.get("requestId")
    if request_id is None:
        request_id = envelope["requestId"] = ""
    elif type(request_id) is not str:
        raise ProtocolError(f"{mt} requestId must be a string, "
                            f"got {_json_type_name(request_id)}")
    if not call_id and mt in _NEEDS_CALL_ID:
        raise ProtocolError(f"{mt} needs a non-empty callId")
    if not request_id and mt in _NEEDS_REQUEST_ID:
        raise ProtocolError(f"{mt} needs a non-empty requestId")
    payload = validate_payload(mt, envelope.get("payload"))
    envelope["payload"] = payload
    return payload


__all__ = [name for name in dir() if not name.startswith("_") and name not in {
    "annotations", "Any", "Literal", "NotRequired", "TypedDict", "load"}]
