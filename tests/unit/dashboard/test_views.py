"""The API's JSON of a task's result: outputs as JSON text, each cut to a bound,
one page of them; the failure with the traceback hook; a task summary."""
from __future__ import annotations

import json

from blockx.dashboard.views import OUTPUT_CHARS, PAGE_OUTPUTS, failure_traceback, result_json, summary_json
from blockx.worker.v1 import worker_pb2 as pb


def test_a_result_page_as_json():
    r = pb.TaskResult(state=pb.TASK_STATE_SUCCEEDED, outputs=[json.dumps({"k": i}).encode() for i in range(80)],
                      outputs_total=500, outputs_offset=100, outputs_truncated=True)
    r.statistic.cache_hits = 7
    out = result_json("t1", pb.TASK_STATE_SUCCEEDED, r, "w:1")
    assert out["terminal"] and out["state"] == "SUCCEEDED" and out["worker"] == "w:1"
    assert len(out["outputs"]) == PAGE_OUTPUTS and out["outputs"][0] == '{"k": 0}'
    assert (out["outputs_offset"], out["outputs_total"]) == (100, 500)
    assert out["statistic"]["cache_hits"] == 7


def test_long_and_non_json_outputs_are_text_within_the_bound():
    r = pb.TaskResult(outputs=[json.dumps("x" * 10_000).encode(), b"\xff<script>"])
    out = result_json("t", pb.TASK_STATE_SUCCEEDED, r, "w")
    assert len(out["outputs"][0]) < OUTPUT_CHARS + 40 and out["outputs"][0].endswith("characters)")
    assert out["outputs"][1] == "\ufffd<script>"          # text: the page shows it with textContent


def test_a_failure_and_the_traceback_hook():
    r = pb.TaskResult(state=pb.TASK_STATE_FAILED, failure_code="CALL_FAILED", failure_message="boom")
    out = result_json("t", pb.TASK_STATE_FAILED, r, "w")
    assert (out["failure_code"], out["failure_message"]) == ("CALL_FAILED", "boom")
    assert out["failure_traceback"] == failure_traceback(r)       # "" until TaskResult carries one
    assert result_json("t", pb.TASK_STATE_RUNNING, None, "w") == {"task_id": "t", "state": "RUNNING",
                                                                   "worker": "w", "terminal": False}


def test_a_summary():
    s = summary_json(pb.TaskSummary(task_id="t", state=pb.TASK_STATE_RUNNING, phase="CALLS", owner="alice",
                                    calls_total=10, calls_done=4))
    assert (s["state"], s["phase"], s["owner"], s["calls_done"], s["calls_total"]) == ("RUNNING", "CALLS", "alice",
                                                                                       4, 10)
