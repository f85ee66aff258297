"""A TraceBuffer in the Chrome trace-event format (what Perfetto and chrome://tracing open).

Only run when a trace is asked for (GetTaskTrace): the recorder keeps raw tuples,
this turns them into a JSON object ``{"traceEvents": [...], ...}``:

- one process (pid 1) named after the task;
- lane (tid) 1, "worker: task phases": the task's span with its phases nested
  in it (activation, builder, calls, plugin), instants for call commits
  ("calls queued") and executor losses;
- one lane per executor (named by its executor id) holding the call attempts
  that ran there as complete events ("ph": "X", ts/dur in microseconds). The
  executor sends no frame when it starts a call, so an attempt's span starts
  when the Worker sent its ExecuteCall and ends at its CallCompleted / CallFailed
  (args: outcome, attempt, budgetUsedMs, queuedUs: time from commit or retry to
  the send). Calls that overlap on one executor (it runs several at once) go to
  extra lanes of that executor ("exec-0 #2"), because spans on one lane must nest;
- a subcall runs beside its parent: its span sits inside the parent's span on
  the parent's lane; when it cannot (another executor, or overlapping), it goes
  to a lane of its own executor with a flow arrow ("s"/"f") from the parent;
- IO waits are spans ("io <backend>") inside their call's span; a retry is an
  instant ("ph": "i") at the end of the failed attempt with its reason
  (the failure kind) and backoff;
- an attempt still running when the trace is taken ends "now" (args.state
  "running"); one cut short by the task's end or its executor's loss ends there.

Timestamps are microseconds since the task was accepted (the trace clock is
monotonic). ``otherData`` carries the task id, complete / sampled / truncated,
the sample rate and the dropped count."""
from __future__ import annotations

from blockx.protocol.messages import EXECUTOR_LOST
from blockx.adapters.telemetry.trace_recorder import (DONE, IO_DONE, IO_WAIT, LOST, PHASE, QUEUED, RETRY, SENT, SUBCALL,
                                            TASK_END, TASK_START, TraceBuffer)

PID = 1
PHASE_TID = 1
_EXEC_TID_BASE = 1000      # executor i, its lane j: 1000 * (i + 1) + j


class _Span:
    __slots__ = ("start", "end", "name", "cat", "args", "tid", "executor", "call_id", "parent", "state",
                 "children")

    def __init__(self, start, name, cat, args, executor="", call_id="", parent=None) -> None:
        self.start = start
        self.end = -1
        self.name = name
        self.cat = cat
        self.args = args
        self.tid = 0
        self.executor = executor
        self.call_id = call_id
        self.parent = parent          # the enclosing _Span (a subcall's or IO wait's call)
        self.state = ""
        self.children: list[_Span] = []


def chrome_trace(tr: TraceBuffer, now_us: int) -> dict:
    """The trace-event JSON object of ``tr``, taken at ``now_us`` (the trace clock)."""
    events = tr.events
    t0 = events[0][1] if events else now_us
    end_t = now_us
    task_end = None
    phases: list[tuple[int, str, str]] = []
    instants: list[dict] = []
    queued_at: dict[int, int] = {}          # batch -> commit time (-1: the one-shot list)
    attempts: dict[tuple[str, int], _Span] = {}
    open_by_call: dict[str, _Span] = {}     # the latest attempt of each call
    io_open: dict[str, _Span] = {}
    requested: dict[str, int] = {}          # subcall id -> when its parent asked
    retries: dict[str, tuple[int, int]] = {}    # call id -> (retry time, backoff ms) of its latest retry
    spans: list[_Span] = []
    sp: _Span | None

    for ev in events:
        k = ev[0]
        t = ev[1]
        if k == SENT:
            _, _, call_id, executor, attempt, parent_id, function_id = ev
            q = _queued_since(call_id, attempt, parent_id, tr, queued_at, requested, retries)
            parent = open_by_call.get(parent_id) if parent_id else None
            sp = _Span(t, function_id, "subcall" if parent_id else "call",
                       {"callId": call_id, "attempt": attempt, "executor": executor,
                        **({"parentCallId": parent_id} if parent_id else {}),
                        **({"queuedUs": max(0, t - q)} if q is not None else {})},
                       executor, call_id, parent)
            attempts[(call_id, attempt)] = sp
            open_by_call[call_id] = sp
            spans.append(sp)
        elif k == DONE:
            _, _, call_id, executor, attempt, kind, budget = ev
            sp = attempts.get((call_id, attempt))
            if sp is not None and sp.end < 0:
                sp.end = t
                sp.args["outcome"] = kind or "ok"
                sp.args["budgetUsedMs"] = budget
                _close_io(io_open, call_id, t)
        elif k == IO_WAIT:
            _, _, call_id, attempt, backend = ev
            parent = attempts.get((call_id, attempt))
            if parent is not None:
                sp = _Span(t, f"io {backend}" if backend else "io", "io", {"callId": call_id, "backend": backend},
                           parent.executor, call_id, parent)
                io_open[call_id] = sp
                spans.append(sp)
        elif k == IO_DONE:
            sp = io_open.pop(ev[2], None)
            if sp is not None:
                sp.end = t
                sp.args["ok"] = ev[3]
        elif k == SUBCALL:
            requested[ev[3]] = t
        elif k == RETRY:
            _, _, call_id, backoff, is_retry = ev
            retries[call_id] = (t, backoff)
            last = open_by_call.get(call_id) if is_retry else None
            if not is_retry:
                reason = "bind failed"          # no attempt used: the call waits for a context
            elif last is None or last.end < 0:
                reason = "not sent"             # the ExecuteCall could not be sent (e.g. OUTBOX_FULL)
                last = None
            else:
                reason = last.args.get("outcome", "")
            instants.append({"name": "retry" if is_retry else "requeue", "ph": "i", "s": "t", "ts": t,
                             "_span": last, "tid": PHASE_TID,
                             "args": {"callId": call_id, "reason": reason, "backoffMs": backoff,
                                      **({"failedAttempt": last.args["attempt"]} if last is not None else {})}})
        elif k == QUEUED:
            queued_at[ev[3]] = t
            instants.append({"name": "calls queued", "ph": "i", "s": "t", "ts": t, "tid": PHASE_TID,
                             "args": {"count": ev[2], **({"batch": ev[3]} if ev[3] >= 0 else {})}})
        elif k == PHASE:
            phases.append((t, ev[2], ev[3]))
        elif k == LOST:
            for sp in open_by_call.values():     # its attempts end here, without a frame
                if sp.end < 0 and sp.executor == ev[2]:
                    sp.end = t
                    sp.args["outcome"] = EXECUTOR_LOST
                    _close_io(io_open, sp.call_id, t)
            instants.append({"name": f"executor {ev[2]} lost", "ph": "i", "s": "p", "ts": t, "tid": PHASE_TID,
                             "args": {"executor": ev[2], "reason": ev[3]}})
        elif k == TASK_END:
            task_end = ev
            end_t = t
        elif k == TASK_START:
            t0 = t

    # Attempts never finished by a frame or a loss: cut by the task's end, or running now.
    for sp in spans:
        if sp.end >= 0:
            continue
        if sp.cat == "io":
            sp.end = sp.parent.end if sp.parent is not None and sp.parent.end >= 0 else end_t
            sp.args["state"] = "unfinished" if task_end is not None else "waiting"
        elif task_end is not None:
            sp.end = end_t
            sp.args["outcome"] = "cancelled (the task ended)"
        else:
            sp.end = end_t
            sp.args["state"] = "running"
    for sp in spans:      # a child's span lies inside its parent's, whatever the clock granularity did
        p = sp.parent
        if p is not None and p.executor == sp.executor and p.start <= sp.start <= p.end:
            sp.end = min(max(sp.end, sp.start), p.end)
        sp.end = max(sp.end, sp.start)

    out: list[dict] = [
        {"name": "process_name", "ph": "M", "pid": PID, "tid": 0, "args": {"name": f"blockx task {tr.task_id}"}},
        {"name": "thread_name", "ph": "M", "pid": PID, "tid": PHASE_TID, "args": {"name": "worker: task phases"}},
        {"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": PHASE_TID, "args": {"sort_index": 0}},
    ]
    out.extend(_phase_events(t0, end_t, phases, task_end, tr))
    lanes = _Lanes()
    flows = lanes.place(spans)
    for sp in spans:
        out.append({"name": sp.name, "cat": sp.cat, "ph": "X", "pid": PID, "tid": sp.tid,
                    "ts": sp.start - t0, "dur": sp.end - sp.start, "args": sp.args})
    for i, (parent, child) in enumerate(flows, 1):
        out.append({"name": "subcall", "cat": "subcall", "ph": "s", "id": i, "pid": PID, "tid": parent.tid,
                    "ts": child.start - t0})
        out.append({"name": "subcall", "cat": "subcall", "ph": "f", "bp": "e", "id": i, "pid": PID,
                    "tid": child.tid, "ts": child.start - t0})
    for ins in instants:
        sp = ins.pop("_span", None)
        ins["tid"] = sp.tid if sp is not None else ins.get("tid", PHASE_TID)
        if sp is not None:
            ins["ts"] = max(sp.start, min(ins["ts"], sp.end))
        ins["ts"] -= t0
        ins["pid"] = PID
        out.append(ins)
    out.extend(lanes.metadata())
    return {
        "traceEvents": out,
        "displayTimeUnit": "ms",
        "otherData": {
            "taskId": tr.task_id, "complete": tr.ended, "sampled": tr.sampled, "sampleEvery": tr.sample_every,
            "truncated": tr.truncated > 0, "eventsRecorded": len(events), "eventsDropped": tr.dropped,
            "clock": "monotonic, microseconds since the task was accepted",
        },
    }


def _queued_since(call_id, attempt, parent_id, tr, queued_at, requested, retries):
    """When the attempt became ready to send: its retry's end of backoff, the
    parent's subcall request, or its batch's commit."""
    if attempt > 1 and call_id in retries:
        t, backoff = retries[call_id]
        return t + backoff * 1000
    if parent_id:
        return requested.get(call_id)
    if -1 in queued_at:
        return queued_at[-1]
    rest = call_id[len(tr.task_id) + 1:]
    batch, dot, _row = rest.partition(".")
    if dot and batch.isdigit():
        return queued_at.get(int(batch))
    return None


def _close_io(io_open, call_id, t) -> None:
    sp = io_open.pop(call_id, None)
    if sp is not None:
        sp.end = t
        sp.args["state"] = "unfinished"


def _phase_events(t0, end_t, phases, task_end, tr) -> list[dict]:
    out = []
    task_args = {"taskId": tr.task_id}
    if task_end is not None:
        state, code, message = task_end[2], task_end[3], task_end[4]
        task_args.update({"state": state, **({"failureCode": code, "failureMessage": message} if code else {})})
        if len(task_end) > 6:       # the call that failed the task (trace_recorder.task_ended)
            task_args.update({"failureCallId": task_end[6], "failureTraceback": task_end[7],
                              "failureLocals": dict(task_end[8])})
    else:
        task_args["state"] = "RUNNING"
    out.append({"name": f"task {tr.task_id}", "cat": "task", "ph": "X", "pid": PID, "tid": PHASE_TID,
                "ts": 0, "dur": max(0, end_t - t0), "args": task_args})
    bounds = [(t0, "activation", "")] + phases
    for i, (start, name, detail) in enumerate(bounds):
        stop = bounds[i + 1][0] if i + 1 < len(bounds) else end_t
        args = {"detail": detail} if detail else {}
        if name == "plugin" and task_end is not None:
            for pr in task_end[5]:
                args.update({"plugin": pr.plugin, "ok": pr.ok, "message": pr.message})
        if i + 1 == len(bounds) and task_end is None:
            args["state"] = "running"
        out.append({"name": name if not detail or name != "builder" else f"builder {detail}", "cat": "phase",
                    "ph": "X", "pid": PID, "tid": PHASE_TID, "ts": max(0, start - t0),
                    "dur": max(0, min(stop, end_t) - start), "args": args})
    return out


class _Lanes:
    """Packs spans into lanes so that spans on one lane nest: each executor gets
    lanes on demand; a child goes on its parent's lane when it fits inside it."""

    def __init__(self) -> None:
        self._executors: dict[str, list[list[_Span]]] = {}   # executor -> its lanes, each a stack of open spans
        self._order: list[str] = []

    def _tid(self, executor: str, lane: int) -> int:
        return _EXEC_TID_BASE * (self._order.index(executor) + 1) + lane

    def place(self, spans: list[_Span]) -> list[tuple[_Span, _Span]]:
        flows = []
        spans.sort(key=lambda s: (s.start, -s.end, s.cat == "io"))
        for sp in spans:
            lanes = self._executors.get(sp.executor)
            if lanes is None:
                lanes = self._executors[sp.executor] = []
                self._order.append(sp.executor)
            for stack in lanes:
                while stack and stack[-1].end <= sp.start and stack[-1] is not sp.parent:
                    stack.pop()
            p = sp.parent
            placed = False
            if p is not None and p.executor == sp.executor and p.tid:
                stack = lanes[(p.tid % _EXEC_TID_BASE)]
                if stack and stack[-1] is p and sp.end <= p.end:
                    stack.append(sp)
                    sp.tid = p.tid
                    placed = True
            if not placed:
                for j, stack in enumerate(lanes):
                    if not stack:
                        break
                else:
                    j = len(lanes)
                    lanes.append([])
                lanes[j].append(sp)
                sp.tid = self._tid(sp.executor, j)
                if p is not None and sp.cat != "io":
                    flows.append((p, sp))
        return flows

    def metadata(self) -> list[dict]:
        out = []
        for executor in self._order:
            for j in range(len(self._executors[executor])):
                tid = self._tid(executor, j)
                name = executor if j == 0 else f"{executor} #{j + 1}"
                out.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": name}})
                out.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid,
                            "args": {"sort_index": tid}})
        return out
