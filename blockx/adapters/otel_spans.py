"""OpenTelemetry spans of the tasks a Worker runs: the hooks the Orchestrator, the
task phases, the dispatch actor and the executor events call.

One span per task (``task``, kind SERVER), from its activation to its terminal
update, whose parent is the caller's W3C trace context (trace_context.py: the
traceparent of the SubmitTask metadata or of the TaskSession stream) or, with
none, a new root. Its phases are its children, one after the other:
``builder``, ``calls``, ``writer``. A task that ends FAILED gets an ERROR
status with its failure code and message on the task span and on the phase it
failed in.

Per-call spans (``call <function>``, children of the calls phase, a subcall's
of its parent call's span when that one is recorded) are only made for a
sampled fraction of the calls of a task whose span is recording:
``call_span_rate`` (otelCallSpanRate), decided from the call id's CRC-32, so
every attempt of a call is in or out together; 0 records none and costs one
branch per call, since the dispatch actor then holds no hook at all.

The tracer comes from a TracerProvider handed in (otel_export.py builds the
OTLP one, whose batch span processor exports from its own thread, so ending a
span only queues it). The spans' sampling decision is the provider's sampler
(OTEL_TRACES_SAMPLER). Nothing here reads the cores' state: the hooks get the
commands the cores emitted."""
from __future__ import annotations

from zlib import crc32

from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from blockx.adapters.trace_context import TraceContext, as_carrier
from blockx.core.types import StartBuilderPhase, StartCallPhase, StartWriterPhase

_ROOT = Context()                  # no parent: a span started in it is a new trace's root
_CRC_RANGE = 1 << 32
TRACER_NAME = "blockx.worker"


class _Task:
    __slots__ = ("span", "phase", "calls")

    def __init__(self, span) -> None:
        self.span = span
        self.phase = None                 # the open phase span
        self.calls: set[str] | None = None   # ids of this task's open call spans (call spans on)


class TaskSpans:
    def __init__(self, provider, *, call_span_rate: float = 0.0) -> None:
        if not 0.0 <= call_span_rate <= 1.0:
            raise ValueError(f"call_span_rate must be within 0..1, got {call_span_rate}")
        self.provider = provider
        self._tracer = provider.get_tracer(TRACER_NAME)
        self._propagator = TraceContextTextMapPropagator()
        self.call_span_rate = call_span_rate
        # a call is sampled when crc32(call id) < threshold
        self._threshold = int(call_span_rate * _CRC_RANGE)
        self._tasks: dict[str, _Task] = {}
        self._calls: dict[str, object] = {}     # call id -> its open span (ids are unique across tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def call_spans(self) -> bool:
        """Whether the call hooks are wired at all (otelCallSpanRate > 0)."""
        return self._threshold > 0

    # ---- the task ----------------------------------------------------------------------

    def task_started(self, task_id: str, instance_id: str, trace_context: TraceContext | None) -> None:
        parent = self._propagator.extract(as_carrier(trace_context), context=_ROOT) if trace_context else _ROOT
        span = self._tracer.start_span("task", context=parent, kind=SpanKind.SERVER, attributes={
            "blockx.task.id": task_id, "blockx.task.instance_id": instance_id})
        self._tasks[task_id] = _Task(span)

    def phase_started(self, cmd) -> None:
        """A Start*Phase command of the core: the previous phase ends, this one starts."""
        st = self._tasks.get(cmd.task_id)
        if st is None:
            return
        kind = type(cmd)
        if kind is StartBuilderPhase:
            name, attrs = "builder", {"blockx.builder": cmd.function_call.type}
        elif kind is StartCallPhase:
            name, attrs = "calls", {"blockx.calls.streaming": bool(cmd.streaming)}
        elif kind is StartWriterPhase:
            rh = cmd.result_handler
            name, attrs = "writer", {"blockx.writer": rh.type if rh is not None else ""}
        else:
            return
        if st.phase is not None:
            st.phase.end()
        st.phase = self._tracer.start_span(name, context=set_span_in_context(st.span), attributes=attrs)

    def task_ended(self, task_id: str, state: str, result) -> None:
        st = self._tasks.pop(task_id, None)
        if st is None:
            return
        failed = state != "SUCCEEDED"
        if st.calls:
            for call_id in st.calls:
                span = self._calls.pop(call_id, None)
                if span is not None:
                    span.set_status(Status(StatusCode.ERROR, f"cut short: the task ended {state}"))
                    span.end()
        why = f"{result.failure_code}: {result.failure_message}" if failed else ""
        if st.phase is not None:
            if failed:
                st.phase.set_status(Status(StatusCode.ERROR, why))
            st.phase.end()
        span = st.span
        stat = result.statistic
        span.set_attributes({
            "blockx.task.state": state, "blockx.task.call_count": stat.call_count,
            "blockx.task.calls_failed": stat.calls_failed, "blockx.task.call_retries": stat.call_retries,
            "blockx.task.cache_hits": stat.cache_hits})
        if failed:
            span.set_attribute("blockx.task.failure_code", result.failure_code)
            span.set_status(Status(StatusCode.ERROR, why))
        span.end()

    def trace_context(self, task_id: str) -> TraceContext | None:
        """The task span's own context as W3C metadata (what a shadow copy carries on)."""
        st = self._tasks.get(task_id)
        if st is None:
            return None
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=set_span_in_context(st.span))
        return tuple(carrier.items()) or None

    # ---- calls (wired only when call_spans) ---------------------------------------------

    def call_sent(self, cmd) -> None:
        """The dispatch actor sent ExecuteCall for a DispatchCallCmd."""
        st = self._tasks.get(cmd.task_id)
        if st is None or st.phase is None:
            return
        call_id = cmd.call_id
        if crc32(call_id.encode()) >= self._threshold or not st.span.is_recording():
            return
        calls = self._calls
        prev = calls.pop(call_id, None)          # an attempt that never answered (its executor was lost)
        if prev is not None:
            prev.set_status(Status(StatusCode.ERROR, "no answer: the call was sent again"))
            prev.end()
        parent = calls.get(cmd.parent_call_id) if cmd.parent_call_id else None
        calls[call_id] = self._tracer.start_span(
            f"call {cmd.function_id}", context=set_span_in_context(parent if parent is not None else st.phase),
            attributes={"blockx.call.id": call_id, "blockx.call.attempt": cmd.attempt_seq,
                        "blockx.executor.id": cmd.executor_id})
        if st.calls is None:
            st.calls = set()
        st.calls.add(call_id)

    def call_done(self, call_id: str, error_kind: str) -> None:
        """An accepted CallCompleted (error_kind "") or CallFailed frame."""
        span = self._calls.pop(call_id, None)
        if span is None:
            return
        if error_kind:
            span.set_status(Status(StatusCode.ERROR, error_kind))
        span.end()

    # ---- end -----------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Flush what is queued and stop the exporter (blocking: run it off the loop)."""
        shutdown = getattr(self.provider, "shutdown", None)
        if shutdown is not None:
            shutdown()
