"""The JSON the dashboard's API answers with, from the workers' protobuf messages.

Everything here is data from a worker (task ids, owners, messages, outputs): the
page puts it into the DOM as text only (textContent), never as markup, so a task
id or a failure message cannot become script. Outputs are shown as JSON text,
each cut at ``OUTPUT_CHARS`` (the full result stays on the worker)."""
from __future__ import annotations

import json
from typing import Any

from blockx.client.outcome import state_name, statistic_dict

OUTPUT_CHARS = 2000
PAGE_OUTPUTS = 50
STATES = ("ALLOCATED", "RUNNING", "SUCCEEDED", "FAILED")
PHASES = ("RESERVED", "PREPARING", "BUILDER", "CALLS", "PLUGIN", "TERMINAL")


def summary_json(t) -> dict[str, Any]:
    """One pb.TaskSummary."""
    return {"task_id": t.task_id, "state": state_name(t.state), "phase": t.phase, "owner": t.owner,
            "instance_id": t.instance_id, "created_at_ms": t.created_at_ms, "finished_at_ms": t.finished_at_ms,
            "age_ms": t.age_ms, "calls_total": t.calls_total, "calls_done": t.calls_done,
            "failure_code": t.failure_code}


def failure_traceback(result) -> str:
    """The traceback a failed TaskResult carries, when the worker sends one.

    The hook for TaskResult's traceback fields (being added to the proto): until
    they exist this answers "", and the page shows the failure message alone."""
    for name in ("failure_traceback", "traceback"):
        if name in type(result).DESCRIPTOR.fields_by_name:
            return str(getattr(result, name))
    return ""


def _output_text(raw: bytes) -> str:
    try:
        text = json.dumps(json.loads(raw), ensure_ascii=False)
    except ValueError:
        text = raw.decode("utf-8", "replace")
    return text if len(text) <= OUTPUT_CHARS else text[:OUTPUT_CHARS] + f"... ({len(text)} characters)"


def result_json(task_id: str, state: int, result, worker: str) -> dict[str, Any]:
    """A GetTaskResult answer (state, and once terminal the result's first page)."""
    out: dict[str, Any] = {"task_id": task_id, "state": state_name(state), "worker": worker,
                           "terminal": state_name(state) in ("SUCCEEDED", "FAILED")}
    if result is None:
        return out
    out.update({
        "failure_code": result.failure_code, "failure_message": result.failure_message,
        "failure_traceback": failure_traceback(result), "retryable": result.retryable,
        "statistic": statistic_dict(result.statistic),
        "plugin_results": [{"plugin": p.plugin, "ok": p.ok, "message": p.message} for p in result.plugin_results],
        "outputs": [_output_text(o) for o in result.outputs[:PAGE_OUTPUTS]],
        "outputs_offset": result.outputs_offset,
        "outputs_total": max(result.outputs_total, result.outputs_offset + len(result.outputs)),
        "outputs_written": result.outputs_written,
    })
    return out


def progress_json(p) -> dict[str, int]:
    return {"calls_total": p.total, "calls_done": p.done, "calls_failed": p.failed, "calls_retried": p.retried}


ACTIVE_PHASES = ("PREPARING", "BUILDER", "CALLS", "PLUGIN")


def status_row(st) -> dict[str, Any]:
    """The fleet row's part that comes from GetWorkerStatus (admin only)."""
    ex = st.executors
    return {"version": st.version, "ready": st.ready, "draining": st.draining,
            "slots": {"total": st.slots.total, "free": st.slots.free, "reserved": st.slots.reserved,
                      "running": st.slots.running},
            "tasks_by_phase": {p: st.tasks_by_phase.get(p, 0) for p in ACTIVE_PHASES},
            "executors_healthy": sum(1 for e in ex if e.healthy), "executors_total": len(ex),
            "executor_restarts": sum(e.restarts for e in ex), "uptime_ms": st.uptime_ms,
            "etcd_state": st.etcd_state}
