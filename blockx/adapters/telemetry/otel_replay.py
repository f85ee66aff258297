"""The OpenTelemetry SDK's spans of the task records otel_spans.py makes: each
record is put to the sampler (OTEL_TRACES_SAMPLER, through the SDK), and a
sampled one becomes finished ReadableSpans handed to a span processor (the
exporter process's batch processor in front of the OTLP exporter, or a test's
in-memory one): the task span, its phases and its recorded calls."""
from __future__ import annotations

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState, set_span_in_context,
)

from blockx import __version__

SCOPE = InstrumentationScope("blockx.worker", __version__)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_OK = Status(StatusCode.UNSET)


class SpanReplay:
    def __init__(self, processor, resource, sampler) -> None:
        self.processor = processor
        self.resource = resource
        self.sampler = sampler
        self.dropped_by_sampler = 0

    def batch(self, records: list) -> None:
        for r in records:
            self(r)

    def __call__(self, r: list) -> None:
        """One task record (otel_spans.py) into its spans, if the sampler keeps it."""
        (trace_hex, span_hex, parent_hex, parent_flags, tracestate, task_id, instance_id, start, end,
         state, failure_code, failure_message, stat, phases, calls) = r
        trace_id = int(trace_hex, 16)
        ts = TraceState.from_header([tracestate]) if tracestate else TraceState()
        parent = None
        parent_ctx = Context()
        if parent_hex:
            parent = SpanContext(trace_id, int(parent_hex, 16), True, TraceFlags(parent_flags), ts)
            parent_ctx = set_span_in_context(NonRecordingSpan(parent), Context())
        attrs = {"blockx.task.id": task_id, "blockx.task.instance_id": instance_id}
        decision = self.sampler.should_sample(parent_ctx, trace_id, "task", SpanKind.SERVER, attrs)
        if not decision.decision.is_sampled():
            self.dropped_by_sampler += 1
            return
        if decision.trace_state is not None:
            ts = decision.trace_state
        attrs.update(decision.attributes or {})
        failed = state != "SUCCEEDED"
        status = Status(StatusCode.ERROR, f"{failure_code}: {failure_message}") if failed else _OK
        task_ctx = SpanContext(trace_id, int(span_hex, 16), False, _SAMPLED, ts)
        attrs.update({"blockx.task.state": state, "blockx.task.call_count": stat[0],
                      "blockx.task.calls_failed": stat[1], "blockx.task.call_retries": stat[2],
                      "blockx.task.cache_hits": stat[3]})
        if failed:
            attrs["blockx.task.failure_code"] = failure_code
        emit = self.processor.on_end
        span_ctx = {}
        for i, (name, key, value, t0, sid) in enumerate(phases):
            last = i == len(phases) - 1
            ctx = span_ctx[sid] = SpanContext(trace_id, int(sid, 16), False, _SAMPLED, ts)
            emit(self._span(name, ctx, task_ctx, {key: value}, SpanKind.INTERNAL,
                            status if last and failed else _OK, t0, end if last else phases[i + 1][3]))
        for sid, psid, function_id, call_id, attempt, executor_id, t0, t1, error in calls:
            ctx = span_ctx[sid] = SpanContext(trace_id, int(sid, 16), False, _SAMPLED, ts)
            emit(self._span(f"call {function_id}", ctx, span_ctx.get(psid, task_ctx),
                            {"blockx.call.id": call_id, "blockx.call.attempt": attempt,
                             "blockx.executor.id": executor_id}, SpanKind.INTERNAL,
                            Status(StatusCode.ERROR, error) if error else _OK, t0, t1 or end))
        emit(self._span("task", task_ctx, parent, attrs, SpanKind.SERVER, status, start, end))

    def _span(self, name, ctx, parent, attrs, kind, status, start, end) -> ReadableSpan:
        return ReadableSpan(name, context=ctx, parent=parent, resource=self.resource, attributes=attrs, kind=kind,
                            status=status, start_time=start, end_time=end, instrumentation_scope=SCOPE)
