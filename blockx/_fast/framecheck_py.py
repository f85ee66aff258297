"""Fast acceptance of the frames of every call and round trip, pure-Python twin
of framecheck.pyx.

`FrameChecks.route(envelope, accept)` returns the payload of a well-formed
CallCompleted, ExecuteCall, CallWaiting(io | subcall) or ResumeCall(io |
subcall, with a result), with exactly the defaults `messages._validate` would
fill in place; for anything else, or anything unusual, it returns None and the
caller takes the general path, which names the problem. It never raises and
never rejects: it only decides sooner what the general path would accept.
The message-type and kind names are given by blockx.protocol.messages (one
copy of the wire names)."""
from __future__ import annotations


class FrameChecks:
    __slots__ = ("execute_call", "resume_call", "call_waiting", "call_completed",
                 "wait_io", "wait_subcall", "default_entry")

    def __init__(self, execute_call: str, resume_call: str, call_waiting: str, call_completed: str,
                 wait_io: str, wait_subcall: str, default_entry: str) -> None:
        self.execute_call = execute_call
        self.resume_call = resume_call
        self.call_waiting = call_waiting
        self.call_completed = call_completed
        self.wait_io = wait_io
        self.wait_subcall = wait_subcall
        self.default_entry = default_entry

    def route(self, envelope, accept):
        """The fast path of the envelope's own message type (None: take the general one)."""
        if type(envelope) is not dict:
            return None
        mt = envelope.get("messageType")
        if type(mt) is not str:
            return None
        if mt == self.call_completed:
            return self.completed(envelope, accept)
        if mt == self.execute_call:
            return self.execute(envelope, accept)
        if mt == self.call_waiting or mt == self.resume_call:
            return self.wait_resume(envelope, accept)
        return None

    def wait_resume(self, envelope, accept):
        """A well-formed CallWaiting(io | subcall) (the Worker's side) or a
        ResumeCall carrying a result of an io / subcall wait (the executor's side)."""
        if type(envelope) is not dict:
            return None
        mt = envelope.get("messageType")
        if mt != self.call_waiting and mt != self.resume_call:
            return None
        if accept is not None and mt not in accept:
            return None
        p = envelope.get("payload")
        call_id = envelope.get("callId")
        request_id = envelope.get("requestId")
        if (type(p) is not dict or type(call_id) is not str or not call_id
                or type(request_id) is not str or not request_id):
            return None
        if mt == self.resume_call:
            kind = p.get("resumeKind")
            if type(kind) is not str or (kind != self.wait_io and kind != self.wait_subcall) \
                    or "result" not in p or p.get("error") is not None:
                return None
            used = p.get("budgetUsedMs")
            if used is None:
                p["budgetUsedMs"] = 0
            elif type(used) is not int:
                return None
            return p
        if type(p.get("taskId")) is not str or type(p.get("attemptSeq")) is not int:
            return None
        kind = p.get("waitKind")
        if type(kind) is not str:
            return None
        if kind == self.wait_io:
            if type(p.get("backend")) is not str or "request" not in p:
                return None
            return p
        if kind == self.wait_subcall:
            ancestry = p.get("ancestry")
            if (type(p.get("functionId")) is not str or type(p.get("args")) is not list
                    or type(p.get("grantedBudgetMs")) is not int or type(ancestry) is not list):
                return None
            for item in ancestry:
                if type(item) is not str:
                    return None
            return p
        return None

    def execute(self, envelope, accept):
        """The executor's hottest inbound frame: a well-formed ExecuteCall."""
        if type(envelope) is not dict or envelope.get("messageType") != self.execute_call:
            return None
        if accept is not None and self.execute_call not in accept:
            return None
        p = envelope.get("payload")
        call_id = envelope.get("callId")
        request_id = envelope.get("requestId")
        if (type(p) is not dict or type(call_id) is not str or not call_id
                or (request_id is not None and type(request_id) is not str)
                or type(p.get("taskId")) is not str or type(p.get("functionId")) is not str
                or type(p.get("functionCodeDigest")) is not str or type(p.get("args")) is not list
                or type(p.get("attemptSeq")) is not int):
            return None
        entry = p.get("entrySelector")
        parent = p.get("parentCallId")
        budget = p.get("callBudgetMs")
        if ((entry is not None and type(entry) is not str) or (parent is not None and type(parent) is not str)
                or (budget is not None and type(budget) is not int)):
            return None
        if request_id is None:
            envelope["requestId"] = ""
        if entry is None:
            p["entrySelector"] = self.default_entry
        if parent is None:
            p["parentCallId"] = ""
        if budget is None:
            p["callBudgetMs"] = 0
        return p

    def completed(self, envelope, accept):
        """The common case of the hottest inbound frame: a well-formed CallCompleted."""
        if type(envelope) is not dict or envelope.get("messageType") != self.call_completed:
            return None
        if accept is not None and self.call_completed not in accept:
            return None
        p = envelope.get("payload")
        call_id = envelope.get("callId")
        request_id = envelope.get("requestId")
        if (type(p) is not dict or type(call_id) is not str or not call_id
                or (request_id is not None and type(request_id) is not str)
                or type(p.get("taskId")) is not str or type(p.get("attemptSeq")) is not int
                or "output" not in p or type(p.get("budgetUsedMs")) is not int):
            return None
        started = p.get("startedAtMs")
        duration = p.get("durationMs")
        if (started is not None and type(started) is not int) or \
                (duration is not None and type(duration) is not int):
            return None
        if request_id is None:
            envelope["requestId"] = ""
        if started is None:
            p["startedAtMs"] = 0
        if duration is None:
            p["durationMs"] = 0
        return p
