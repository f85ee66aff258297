"""The JSON the client commands print: a response or TaskUpdate as a JSON object
(outputs and plugin details are JSON in bytes fields on the wire and are decoded,
so the printout is plain JSON), one indented object or one compact line, and the
exit code a task's state maps to (blockx.cli.exit)."""

from __future__ import annotations

import base64
import json
from typing import Any, TextIO

from blockx.cli.exit import EXIT_OK, EXIT_TASK_FAILED


def state_name(value: int) -> str:
    from blockx.client.outcome import state_name as name

    return name(value)


def decode_json_bytes(raw: bytes) -> Any:
    """A JSON-in-bytes field as JSON; anything else as {"base64": ...}."""
    try:
        return json.loads(raw)
    except ValueError:
        return {"base64": base64.b64encode(raw).decode()}


def result_to_json(r) -> dict[str, Any]:
    s = r.statistic
    return {
        "state": state_name(r.state),
        "failureCode": r.failure_code,
        "failureMessage": r.failure_message,
        "retryable": r.retryable,
        "outputs": [decode_json_bytes(o) for o in r.outputs],
        "outputsTotal": r.outputs_total, "outputsTruncated": r.outputs_truncated,
        "outputsWritten": r.outputs_written,
        "pluginResults": [{"plugin": p.plugin, "ok": p.ok, "message": p.message,
                           "details": decode_json_bytes(p.details) if p.details else None}
                          for p in r.plugin_results],
        "statistic": {
            "acceptedAtMs": s.accepted_at_ms, "finishedAtMs": s.finished_at_ms,
            "builderMs": s.builder_ms, "callsMs": s.calls_ms, "pluginMs": s.plugin_ms,
            "callCount": s.call_count, "callsFailed": s.calls_failed,
            "callRetries": s.call_retries, "cacheHits": s.cache_hits,
        },
    }


def response_to_json(msg) -> dict[str, Any]:
    """SubmitTask / GetTaskResult / RequestTaskSlot responses and TaskUpdate."""
    out: dict[str, Any] = {"taskId": msg.task_id}
    if hasattr(msg, "slot_id") and msg.slot_id:
        out["slotId"] = msg.slot_id
    out["state"] = state_name(msg.state)
    if hasattr(msg, "is_terminal"):
        out["isTerminal"] = msg.is_terminal
    if hasattr(msg, "progress") and msg.HasField("progress"):
        p = msg.progress
        out["progress"] = {"callsTotal": p.calls_total, "callsDone": p.calls_done,
                           "callsFailed": p.calls_failed, "callsRetried": p.calls_retried}
    if msg.HasField("result"):
        out["result"] = result_to_json(msg.result)
    return out


def with_all_outputs(client, msg) -> dict[str, Any]:
    """``response_to_json(msg)`` with every output of its result: the pages after the
    one ``msg`` carries are fetched (blockx.client.pages) and appended."""
    obj = response_to_json(msg)
    if msg.HasField("result") and msg.result.outputs_truncated:
        res = obj["result"]
        outs = res["outputs"]
        for page in client.result_pages(msg.task_id, msg.result):
            outs.extend(decode_json_bytes(o) for o in page.outputs)
        res["outputsTruncated"] = False
    return obj


def dump(obj: Any, compact: bool, out: TextIO) -> None:
    if compact:
        out.write(json.dumps(obj, separators=(",", ":")) + "\n")
    else:
        out.write(json.dumps(obj, indent=2) + "\n")
    out.flush()


def exit_for(state: int) -> int:
    from blockx.worker.v1 import worker_pb2 as pb

    return EXIT_TASK_FAILED if state == pb.TASK_STATE_FAILED else EXIT_OK


def is_terminal(state: int) -> bool:
    from blockx.worker.v1 import worker_pb2 as pb

    return state in (pb.TASK_STATE_SUCCEEDED, pb.TASK_STATE_FAILED)
