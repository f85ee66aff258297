"""The caller's W3C trace context (``traceparent``, ``tracestate``) as it came in
the gRPC metadata of a SubmitTask or a TaskSession stream.

It is IO metadata, read and checked here without OpenTelemetry (a worker that
does not export spans still hands it on to its shadow target): a traceparent
that is not a valid W3C header is dropped whole, with its tracestate, so the
task starts a new trace; never an error to the caller. The checked pairs are
the carrier the span exporter (otel.py) extracts the parent from, and the
metadata the shadow forward sends on."""
from __future__ import annotations

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
# A longer tracestate is dropped (the traceparent stays): W3C asks a vendor to
# carry at least 512 characters of it, and it is the caller's, not ours, to grow.
MAX_TRACESTATE_CHARS = 512

_HEX = frozenset("0123456789abcdef")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16

TraceContext = tuple[tuple[str, str], ...]      # the metadata pairs, traceparent first


def valid_traceparent(value: str) -> bool:
    """``value`` is a W3C traceparent: ``vv-<32 hex trace id>-<16 hex span id>-ff``
    in lowercase hex, trace and span ids not all zero, version not ``ff``; a
    version above 00 may carry more fields after a ``-``."""
    if len(value) < 55 or value[2] != "-" or value[35] != "-" or value[52] != "-":
        return False
    version, trace_id, span_id, flags = value[:2], value[3:35], value[36:52], value[53:55]
    if not _HEX.issuperset(version + trace_id + span_id + flags) or version == "ff":
        return False
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return False
    if len(value) > 55:
        return version != "00" and value[55] == "-"
    return True


def incoming(metadata) -> TraceContext | None:
    """The checked trace context of a call's invocation metadata (pairs of key and
    value, as grpc gives them), or None: no traceparent, or a malformed one."""
    parent = state = None
    for key, value in metadata or ():
        if key == TRACEPARENT:
            if parent is not None:
                return None            # two traceparents: which one is the caller's is unknowable
            parent = value
        elif key == TRACESTATE:
            state = value if state is None else f"{state},{value}"   # repeated headers join (RFC 9110)
    if type(parent) is not str or not valid_traceparent(parent.strip()):
        return None
    pairs = [(TRACEPARENT, parent.strip())]
    if type(state) is str and state.strip() and len(state) <= MAX_TRACESTATE_CHARS:
        pairs.append((TRACESTATE, state.strip()))
    return tuple(pairs)


def as_carrier(tc: TraceContext | None) -> dict[str, str]:
    """The context as the text-map carrier a propagator reads."""
    return dict(tc) if tc else {}


__all__ = ["MAX_TRACESTATE_CHARS", "TRACEPARENT", "TRACESTATE", "TraceContext", "as_carrier", "incoming",
           "valid_traceparent"]
