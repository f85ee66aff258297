"""A task's result in pages: no message that carries a result is over resultPageBytes.

Every message that carries a TaskResult (a WatchTasks or session update, a
GetTaskResult reply, a SubmitTask or RequestTaskSlot reply for a task that has
ended) carries one page of it: the outputs that fit in the budget, in order from
``outputs_offset`` (0 unless GetTaskResult asks for another), with
``outputs_total`` and ``outputs_truncated`` (more outputs follow). The rest of
the result (state, failure, plugin results, statistic) is on every page, whole.
GetTaskResult's ``outputs_offset`` and ``outputs_limit`` fetch the other pages.
So a client with gRPC's default 4 MiB receive limit always gets the terminal
update of any task, and no result ends a session or a WatchTasks stream.

The budget counts the whole message as it goes on the wire, a session's framing
(``WRAP_BYTES``) included. The edges:

- An output larger than the room a page has left is not cut: the page ends
  before it. A page that cannot carry even its first output has none
  (``outputs_truncated`` set); a GetTaskResult with ``outputs_limit`` set carries
  at least one output, over the budget if it must, as long as the message fits
  one gRPC message (``grpcMaxMessageBytes``); an output that does not fit even
  that is refused RESOURCE_EXHAUSTED (``PageTooLarge``) for that request alone.
- A result whose failure message and plugin results alone are over the budget
  has pages without the plugin details, their messages cut, flagged
  failure_code RESULT_TOO_LARGE (the task's own failure in failure_message);
  its outputs still page.
- ``outputs_offset`` past ``outputs_total`` is INVALID_ARGUMENT; equal to it is
  an empty last page.

A result that clearly fits (its bulk, counted by len(), within ``FAST_SLACK_BYTES``
of the budget) is sent as the encoder built it, measured no further: the cost of
small results is unchanged.

What an identity other than admin receives (``for_caller``) has its failure
message and plugin messages as blockx.tenant_view.tenant_message makes them: no
server path, no part marked server-only (the functions directory, the other
functions' ids). The stored result, the admin's copy and the log keep every
word; a result without a failure message costs nothing more.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial

from blockx.adapters.grpc import wire
from blockx.adapters.grpc.result_delivery import ENVELOPE_BYTES, RESULT_TOO_LARGE, WRAP_BYTES, ResultDelivery
from blockx.core.config_rules import Rule
from blockx.core.errors import InvalidArgumentError
from blockx.tenant_view import tenant_message
from blockx.worker.v1 import worker_pb2 as pb

MiB = 1024 * 1024
DEFAULT_PAGE_BYTES = MiB
SETTING = "resultPageBytes (RESULT_PAGE_BYTES)"
# The rule of resultPageBytes alone; page_bytes_problem couples it to grpcMaxMessageBytes.
PAGE_RULES = (Rule("result_page_bytes", 16 * 1024, 2**31 - 1),)
# The length prefix of a message's result field grows by at most this much as outputs are added.
_GROWTH = 5
# An output's tag and length prefix take at most this many bytes (outputs under 256 MiB).
_PER_OUTPUT = 5
_BLOCK = 1024                        # outputs fit_count sizes at once
_KEPT_CHARS = 1024                   # of a message, on a page that leaves plugin details out
# What bulk_bytes leaves out of a message (ids, states, statistic, progress, the
# page fields, a session's framing) stays under this.
FAST_SLACK_BYTES = 2048


class PageTooLarge(Exception):
    """One output too large for one gRPC message even alone: RESOURCE_EXHAUSTED."""
    grpc_status_name = "RESOURCE_EXHAUSTED"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def output_cost(n: int) -> int:
    """The bytes an output of ``n`` bytes adds to a TaskResult: its tag, its length, itself."""
    if n < 0x80:
        return n + 2
    if n < 0x4000:
        return n + 3
    if n < 0x200000:
        return n + 4
    if n < 0x10000000:
        return n + 5
    return n + 6


def fit_count(outputs, offset: int, room: int, limit: int | None = None) -> tuple[int, int]:
    """(n, bytes): how many of ``outputs[offset:]`` (at most ``limit``) fit in
    ``room`` bytes, in order, and the bytes they take."""
    end = len(outputs) if limit is None else min(len(outputs), offset + limit)
    used = 0
    i = offset
    # Whole blocks of small outputs (2 bytes of framing each) at C speed, then one by one.
    while end - i >= _BLOCK:
        lens = list(map(len, outputs[i:i + _BLOCK]))
        c = sum(lens) + 2 * _BLOCK
        if max(lens) >= 0x80 or used + c > room:
            break
        used += c
        i += _BLOCK
    while i < end:
        n = len(outputs[i])
        c = n + 2 if n < 0x80 else output_cost(n)
        if used + c > room:
            break
        used += c
        i += 1
    return i - offset, used


def page_request(req: pb.GetTaskResultRequest) -> tuple[int, int | None]:
    """(offset, limit) of a GetTaskResultRequest (limit None: unset); INVALID_ARGUMENT
    for a negative offset or a limit below 1."""
    offset = req.outputs_offset
    if offset < 0:
        raise InvalidArgumentError(
            f"outputs_offset is {offset}: it must be 0 or more (the index of the first output to return; "
            "0 is the start, and a page's outputs_offset plus its number of outputs is the next page's)")
    if not req.HasField("outputs_limit"):
        return offset, None
    limit = req.outputs_limit
    if limit <= 0:
        raise InvalidArgumentError(
            f"outputs_limit is {limit}: it must be at least 1, or left unset for as many outputs as fit "
            f"one page ({SETTING} on the worker)")
    return offset, limit


def bulk_bytes(r) -> int:
    """An upper bound of what ``r``'s outputs, failure message, traceback, locals and
    plugin results take on the wire, by len() alone."""
    outs = r.outputs
    n = sum(map(len, outs)) + _PER_OUTPUT * len(outs) + len(r.failure_message)
    if r.failure_call_id:
        n += len(r.failure_traceback) + sum(len(value) + 80 for _name, value in r.failure_locals)
    for p in r.plugin_results:
        n += len(p.details) + len(p.message) + len(p.plugin) + 16
    return n


def _update_shell(upd: pb.TaskUpdate, result: pb.TaskResult) -> pb.TaskUpdate:
    out = pb.TaskUpdate(task_id=upd.task_id, state=upd.state, is_terminal=upd.is_terminal, result=result)
    if upd.HasField("progress"):
        out.progress.CopyFrom(upd.progress)
    return out


def _slot_shell(snap, result: pb.TaskResult) -> pb.RequestTaskSlotResponse:
    return pb.RequestTaskSlotResponse(task_id=snap.task_id, slot_id=snap.slot_id, state=int(snap.state),
                                      result=result)


def _submit_shell(snap, result: pb.TaskResult) -> pb.SubmitTaskResponse:
    return pb.SubmitTaskResponse(task_id=snap.task_id, state=int(snap.state), result=result)


def _result_shell(snap, result: pb.TaskResult) -> pb.GetTaskResultResponse:
    return pb.GetTaskResultResponse(task_id=snap.task_id, state=int(snap.state), result=result)


# reply kind -> (the whole reply, the reply around a given TaskResult)
_REPLIES = {
    "slot": (wire.slot_response, _slot_shell),
    "submit": (wire.submit_response, _submit_shell),
    "result": (wire.result_response, _result_shell),
}


def page_bytes_problem(page_bytes: int, max_message_bytes: int, name: Callable[[str], str]) -> str | None:
    """resultPageBytes must leave ENVELOPE_BYTES of one gRPC message for the rest of
    the reply (`name` words each setting for the operator)."""
    room = max_message_bytes - ENVELOPE_BYTES
    if page_bytes > room:
        return (f"{name('resultPageBytes')} ({page_bytes}) must be at most {name('grpcMaxMessageBytes')} "
                f"({max_message_bytes}) - {ENVELOPE_BYTES} = {room}: a page of a result must fit one gRPC "
                "message; lower the first or raise the second")
    return None


class ResultPages:
    """The page of a result each reply and update carries (module docstring)."""
    __slots__ = ("budget", "delivery", "_fast", "_upd", "_page")

    def __init__(self, page_bytes: int = DEFAULT_PAGE_BYTES, max_message_bytes: int = 64 * MiB) -> None:
        if page_bytes > max_message_bytes - ENVELOPE_BYTES:
            raise ValueError(f"resultPageBytes {page_bytes} must be at most grpcMaxMessageBytes "
                             f"({max_message_bytes}) - {ENVELOPE_BYTES}")
        self.budget = page_bytes
        self.delivery = ResultDelivery(max_message_bytes)   # one output alone over one gRPC message
        self._fast = page_bytes - FAST_SLACK_BYTES          # a bulk up to this always fits whole
        self._upd: pb.TaskUpdate | None = None              # the last update paged, and its page
        self._page: tuple[pb.TaskUpdate, int] | None = None

    @property
    def fits_bytes(self) -> int:
        """A result bulk (``bulk_bytes``) up to this always fits in one page whole."""
        return self._fast

    def for_caller(self, caller) -> ResultPages:
        """The pages ``caller`` (blockx.core.owners.Caller) receives: these for the
        admin identity and the unrestricted caller (None), a TenantPages otherwise."""
        return self if caller is None or caller.admin else TenantPages(self)

    def update_page(self, upd: pb.TaskUpdate, snap) -> tuple[pb.TaskUpdate, int]:
        """(the update to send, its approximate result bytes): ``upd`` itself when its
        result fits whole, else a copy with the first page of it. ``upd`` is shared
        by every subscriber and never changed; the page is made once for them all."""
        r = snap.result
        if r is None or not upd.HasField("result"):
            return upd, 0
        if upd is self._upd and self._page is not None:
            return self._page
        bulk = bulk_bytes(r)
        if bulk <= self._fast:
            page = (upd, bulk)
        else:
            page = self._cut(snap.task_id, r, partial(_update_shell, upd), 0, None)
        self._upd, self._page = upd, page
        return page

    def fit_update(self, upd: pb.TaskUpdate, snap) -> pb.TaskUpdate:
        """The update to send for ``upd`` (``update_page`` without the size)."""
        return self.update_page(upd, snap)[0]

    def reply(self, snap, kind: str, offset: int = 0, limit: int | None = None):
        """(the reply of ``kind`` ("slot", "submit", "result") for ``snap``, its
        approximate result bytes), carrying the page at ``offset`` of at most
        ``limit`` outputs. InvalidArgumentError for an offset past the outputs;
        PageTooLarge for a single output too large for one gRPC message."""
        whole, shell = _REPLIES[kind]
        r = snap.result
        if r is None:
            return whole(snap), 0
        if offset == 0 and (limit is None or limit >= len(r.outputs)):
            bulk = bulk_bytes(r)
            if bulk <= self._fast:
                return whole(snap), bulk
        return self._cut(snap.task_id, r, partial(shell, snap), offset, limit)

    # ---- the cut -------------------------------------------------------------------

    def _cut(self, task_id: str, r, shell, offset: int, limit: int | None):
        total = len(r.outputs)
        if offset > total:
            raise InvalidArgumentError(
                f"outputs_offset {offset} is past the end of task {task_id!r}'s {total} outputs "
                f"(outputs_total): ask for an offset from 0 to {total}")
        msg = shell(_header(r, offset, total))
        base = msg.ByteSize() + WRAP_BYTES + _GROWTH
        if base > self.budget:
            msg = shell(self._stripped(task_id, r, offset, total, base - WRAP_BYTES - _GROWTH))
            base = msg.ByteSize() + WRAP_BYTES + _GROWTH
        outputs = r.outputs
        n, used = fit_count(outputs, offset, self.budget - base, limit)
        one = n == 0 and limit is not None and offset < total
        if one:
            n, used = 1, output_cost(len(outputs[offset]))     # asked for by count: at least one
        res = msg.result
        if n:
            res.outputs.extend(outputs[offset:offset + n])
        if offset + n >= total:
            res.outputs_truncated = False
        if one and (size := self.delivery.oversize(msg, base + used)):
            raise PageTooLarge(self.delivery.message(task_id, size) + (
                f" (output {offset} of its {total} alone; the other outputs page as usual, from "
                f"outputs_offset {offset + 1})"))
        return msg, base + used

    def _stripped(self, task_id: str, r, offset: int, total: int, size: int) -> pb.TaskResult:
        """The page header of a result whose failure message and plugin results are
        over the budget: without plugin details, messages cut, flagged."""
        msg = (f"the result of task {task_id!r} is {size} bytes without its outputs (its failure message "
               f"and plugin results), over the page budget of {self.budget} bytes ({SETTING}), so its pages "
               "leave out the plugin details and cut the messages; every output is still delivered "
               "(outputs_total; GetTaskResult with outputs_offset fetches the pages after the first). Raise "
               f"{SETTING} (at most grpcMaxMessageBytes - {ENVELOPE_BYTES}) and the client's receive limit "
               "to see them whole")
        if r.failure_code:
            msg += f". The task's own failure was {r.failure_code}: {r.failure_message[:_KEPT_CHARS]}"
        head = _header(dataclasses.replace(r, failure_message="", plugin_results=[], failure_traceback="",
                                           failure_locals=()), offset, total)
        head.failure_code = RESULT_TOO_LARGE
        head.failure_message = msg
        for p in r.plugin_results:
            head.plugin_results.add(plugin=p.plugin[:_KEPT_CHARS], ok=p.ok, message=p.message[:_KEPT_CHARS])
        return head


class TenantPages(ResultPages):
    """ResultPages as a non-admin identity receives them: each page's failure and
    plugin messages through tenant_message (the module docstring). The paging
    itself, and its cache of the last shared update, stay the server's one ResultPages."""
    __slots__ = ("_pages",)

    def __init__(self, pages: ResultPages) -> None:     # pages' budget and limits, not a second set
        self._pages = pages
        self.budget, self.delivery, self._fast = pages.budget, pages.delivery, pages._fast
        self._upd = self._page = None

    def for_caller(self, caller) -> ResultPages:
        return self._pages.for_caller(caller)

    def reply(self, snap, kind: str, offset: int = 0, limit: int | None = None):
        return self._pages.reply(_tenant_snapshot(snap), kind, offset, limit)

    def update_page(self, upd: pb.TaskUpdate, snap) -> tuple[pb.TaskUpdate, int]:
        seen = _tenant_snapshot(snap)
        if seen is not snap and upd.HasField("result"):   # the shared update stays whole for the admin's
            own = pb.TaskUpdate()
            own.CopyFrom(upd)
            _tenant_pb(own.result, seen.result)
            upd = own
        return self._pages.update_page(upd, seen)

    def fit_update(self, upd: pb.TaskUpdate, snap) -> pb.TaskUpdate:
        return self.update_page(upd, snap)[0]


def _tenant_snapshot(snap):
    """``snap`` with its result's messages as a tenant reads them; ``snap`` itself
    when there is nothing to hide (no failure message, no plugin message)."""
    r = snap.result
    if r is None or not (r.failure_message or r.plugin_results or r.failure_traceback):
        return snap
    failure = tenant_message(r.failure_message)
    traceback = tenant_message(r.failure_traceback)    # its last line repeats the message
    plugins = [p if (m := tenant_message(p.message)) == p.message else dataclasses.replace(p, message=m)
               for p in r.plugin_results]
    if (failure == r.failure_message and traceback == r.failure_traceback
            and all(a is b for a, b in zip(plugins, r.plugin_results))):
        return snap
    return dataclasses.replace(snap, result=dataclasses.replace(r, failure_message=failure,
                                                                failure_traceback=traceback,
                                                                plugin_results=plugins))


def _tenant_pb(res: pb.TaskResult, r) -> None:
    res.failure_message = r.failure_message
    res.failure_traceback = r.failure_traceback
    for p, seen in zip(res.plugin_results, r.plugin_results):
        p.message = seen.message


def _header(r, offset: int, total: int) -> pb.TaskResult:
    """``r`` as a pb.TaskResult without its outputs, placed at ``offset`` of ``total``
    (flagged truncated until the cut knows better)."""
    head = wire.result_to_pb(dataclasses.replace(r, outputs=[]))
    head.outputs_total = total
    head.outputs_offset = offset
    head.outputs_truncated = True
    return head
