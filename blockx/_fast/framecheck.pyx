# cython: language_level=3
"""Fast acceptance of the frames of every call and round trip, compiled (twin:
framecheck_py.py, whose docstring holds the rules). Same code; compiled, the
dict lookups and exact-type checks are C calls."""

cimport cython


@cython.final
cdef class FrameChecks:

    def __init__(self, str execute_call, str resume_call, str call_waiting, str call_completed,
                 str wait_io, str wait_subcall, str default_entry):
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
        mt = (<dict>envelope).get("messageType")
        if type(mt) is not str:
            return None
        if mt == self.call_completed:
            return self._completed(<dict>envelope, accept)
        if mt == self.execute_call:
            return self._execute(<dict>envelope, accept)
        if mt == self.call_waiting or mt == self.resume_call:
            return self._wait_resume(<dict>envelope, accept)
        return None

    def wait_resume(self, envelope, accept):
        if type(envelope) is not dict:
            return None
        return self._wait_resume(<dict>envelope, accept)

    def execute(self, envelope, accept):
        if type(envelope) is not dict:
            return None
        return self._execute(<dict>envelope, accept)

    def completed(self, envelope, accept):
        if type(envelope) is not dict:
            return None
        return self._completed(<dict>envelope, accept)

    cdef object _wait_resume(self, dict envelope, object accept):
        cdef dict p
        mt = envelope.get("messageType")
        if mt != self.call_waiting and mt != self.resume_call:
            return None
        if accept is not None and mt not in accept:
            return None
        pp = envelope.get("payload")
        call_id = envelope.get("callId")
        request_id = envelope.get("requestId")
        if (type(pp) is not dict or type(call_id) is not str or not call_id
                or type(request_id) is not str or not request_id):
            return None
        p = <dict>pp
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
            for item in <list>ancestry:
                if type(item) is not str:
                    return None
            return p
        return None

    cdef object _execute(self, dict envelope, object accept):
        cdef dict p
        if envelope.get("messageType") != self.execute_call:
            return None
        if accept is not None and self.execute_call not in accept:
            return None
        pp = envelope.get("payload")
        call_id = envelope.get("callId")
        request_id = envelope.get("requestId")
        if type(pp) is not dict:
            return None
        p = <dict>pp
        if (type(call_id) is not str or not call_id
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

    cdef object _completed(self, dict envelope, object accept):
        cdef dict p
        if envelope.get("messageType") != self.call_completed:
            return None
        if accept is not None and self.call_completed not in accept:
            return None
        pp = envelope.get("payload")
        call_id = envelope.get("callId")
        request_id = envelope.get("requestId")
        if type(pp) is not dict:
            return None
        p = <dict>pp
        if (type(call_id) is not str or not call_id
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
