"""OpenTelemetry spans of the tasks a Worker runs: the hooks the Orchestrator, the
task phases, the dispatch actor and the executor events call.

One span per task (``task``, kind SERVER), from its activation to its terminal
update, whose parent is the caller's W3C trace context (trace_context.py: the
traceparent of the SubmitTask metadata or of the TaskSession stream) or, with
none, a new root. Its phases are its children, one after the other:
``builder``, ``calls``, and ``writer`` (the Plugin phase, under its established span
name) when the task has a plugin. A task that ends FAILED gets an ERROR status
with its failure code and message on the task span and on the phase it ended in.

Per-call spans (``call <function>``, children of the calls phase; a subcall's
is the child of its parent call's span when that one is recorded) are made for
a fraction of the calls only: ``call_span_rate`` (otelCallSpanRate), decided
from the call id's CRC-32, so every attempt of a call is in or out together; 0
records none and costs no branch per call, since the dispatch actor then holds
no hook at all.

Cost. A span object of the OpenTelemetry SDK, and its OTLP encoding, cost tens
of microseconds each, on the event loop or under its GIL: several a task would
cost a short task a large share of its time. So the hooks keep only ids and
clock readings, per task, and hand one finished record per task to ``sink``
(otel_pipe.py: batched to the exporter process, where the SDK's sampler decides
and its batch span processor exports; otel_replay.py turns a record into the
SDK's spans). Nothing here imports OpenTelemetry or reads the cores' state: the
hooks get the commands the cores emitted.

A record is a list: trace id, task span id, parent span id ("" for a root), the
parent's trace flags (-1: none), tracestate, task id, instance id, start and
end (ns since the epoch), state, failure code and message, [call count, calls
failed, call retries, cache hits], phases ([name, attribute, value, start,
span id], each ending where the next starts, the last at the end) and calls
([span id, parent span id, function id, call id, attempt, executor id, start,
end, error kind or ""])."""
from __future__ import annotations

import time
from random import getrandbits
from typing import Any
from zlib import crc32

from blockx.adapters.telemetry.trace_context import TRACESTATE, TraceContext
from blockx.core.call_ids import task_id_of_call
from blockx.core.config_rules import Rule
from blockx.core.types import StartBuilderPhase, StartCallPhase, StartPluginPhase

_CRC_RANGE = 1 << 32
_time_ns = time.time_ns
CUT_SHORT = "cut short: the task ended"
# The rule of the setting TaskSpans takes (otelCallSpanRate).
OTEL_RULES = (Rule("otel_call_span_rate", 0, 1, kind=float),)


def _span_id() -> str:
    return f"{getrandbits(64) or 1:016x}"


class _Task:
    __slots__ = ("trace_id", "span_id", "parent", "flags", "tracestate", "instance_id", "start", "phases", "calls",
                 "open")

    def __init__(self, trace_id: str, parent: str, flags: int, tracestate: str, instance_id: str) -> None:
        self.trace_id = trace_id
        self.span_id = _span_id()
        self.parent = parent                # the caller's span id, "" for a root
        self.flags = flags                  # the caller's trace flags, -1 for a root
        self.tracestate = tracestate
        self.instance_id = instance_id
        self.start = _time_ns()
        self.phases: list = []
        self.calls: list | None = None      # recorded calls (call spans on)
        self.open: dict | None = None       # call id -> its recorded call, until it answers


class TaskSpans:
    def __init__(self, sink: Any, *, call_span_rate: float = 0.0) -> None:
        if not 0.0 <= call_span_rate <= 1.0:
            raise ValueError(f"call_span_rate must be within 0..1, got {call_span_rate}")
        self.sink = sink                      # takes one finished task's record (the ExporterPipe: callable, with close())
        self.call_span_rate = call_span_rate
        self._threshold = int(call_span_rate * _CRC_RANGE)    # a call is recorded when crc32(id) < this
        self._tasks: dict[str, _Task] = {}
        self._open_calls: dict[str, list] = {}  # call id -> its record, across tasks (ids are unique)

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def call_spans(self) -> bool:
        """Whether the call hooks are wired at all (otelCallSpanRate > 0)."""
        return self._threshold > 0

    # ---- the task ----------------------------------------------------------------------

    def task_started(self, task_id: str, instance_id: str, trace_context: TraceContext | None) -> None:
        if trace_context:              # checked already: "vv-<trace id>-<span id>-ff"
            tp = trace_context[0][1]
            state = next((v for k, v in trace_context if k == TRACESTATE), "")
            self._tasks[task_id] = _Task(tp[3:35], tp[36:52], int(tp[53:55], 16), state, instance_id)
        else:
            self._tasks[task_id] = _Task(f"{getrandbits(128) or 1:032x}", "", -1, "", instance_id)

    def phase_started(self, cmd) -> None:
        """A Start*Phase command of the core: the previous phase ends, this one starts."""
        st = self._tasks.get(cmd.task_id)
        if st is None:
            return
        kind = type(cmd)
        if kind is StartBuilderPhase:
            ph = ["builder", "blockx.builder", cmd.function_call.type]
        elif kind is StartCallPhase:
            ph = ["calls", "blockx.calls.streaming", bool(cmd.streaming)]
        elif kind is StartPluginPhase:
            rh = cmd.result_handler
            if rh is None:           # no plugin runs: the calls phase is the last one
                return
            ph = ["writer", "blockx.writer", rh.type]
        else:
            return
        ph += (_time_ns(), _span_id())
        st.phases.append(ph)

    def task_ended(self, task_id: str, state: str, result) -> None:
        st = self._tasks.pop(task_id, None)
        if st is None:
            return
        end = _time_ns()
        if st.open:
            for call_id, c in st.open.items():
                self._open_calls.pop(call_id, None)
                c[7], c[8] = end, f"{CUT_SHORT} {state}"
        stat = result.statistic
        self.sink([st.trace_id, st.span_id, st.parent, st.flags, st.tracestate, task_id, st.instance_id, st.start, end,
                   state, result.failure_code, result.failure_message,
                   [stat.call_count, stat.calls_failed, stat.call_retries, stat.cache_hits],
                   st.phases, st.calls or []])

    def trace_context(self, task_id: str) -> TraceContext | None:
        """The task span's own context as W3C metadata (what a shadow copy carries on):
        the caller's trace flags, or sampled for a new root."""
        st = self._tasks.get(task_id)
        if st is None:
            return None
        tc = (("traceparent", f"00-{st.trace_id}-{st.span_id}-{st.flags if st.flags >= 0 else 1:02x}"),)
        return tc + (((TRACESTATE, st.tracestate),) if st.tracestate else ())

    # ---- calls (wired only when call_spans) ---------------------------------------------

    def call_sent(self, cmd) -> None:
        """The dispatch actor sent ExecuteCall for a DispatchCallCmd."""
        call_id = cmd.call_id
        if crc32(call_id.encode()) >= self._threshold:
            return
        st = self._tasks.get(cmd.task_id)
        if st is None or not st.phases:
            return
        now = _time_ns()
        opened = self._open_calls
        prev = opened.pop(call_id, None)          # an attempt that never answered (its executor was lost)
        if prev is not None:
            prev[7], prev[8] = now, "no answer: the call was sent again"
        parent = opened.get(cmd.parent_call_id) if cmd.parent_call_id else None
        c = [_span_id(), parent[0] if parent is not None else st.phases[-1][4], cmd.function_id, call_id,
             cmd.attempt_seq, cmd.executor_id, now, 0, ""]
        if st.calls is None:
            st.calls, st.open = [], {}
        st.calls.append(c)
        assert st.open is not None
        st.open[call_id] = opened[call_id] = c

    def call_done(self, call_id: str, error_kind: str) -> None:
        """An accepted CallCompleted (error_kind "") or CallFailed frame."""
        c = self._open_calls.pop(call_id, None)
        if c is None:
            return
        c[7], c[8] = _time_ns(), error_kind
        st = self._tasks.get(task_id_of_call(call_id) or "")
        if st is not None and st.open is not None:
            st.open.pop(call_id, None)
