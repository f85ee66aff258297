"""Results in pages: the page-cut arithmetic at the budget's edges, the request's
offset and limit, one output over the budget or over one message, a result whose
plugin details alone are over the budget, and a Session that pages (no result
ends it)."""
import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockx.adapters.grpc import wire
from blockx.adapters.grpc.result_delivery import RESULT_TOO_LARGE, WRAP_BYTES
from blockx.adapters.grpc.result_pages import (
    _GROWTH, PageTooLarge, ResultPages, bulk_bytes, fit_count, output_cost, page_request,
)
from blockx.adapters.grpc.session import Session
from blockx.core.errors import InvalidArgumentError
from blockx.core.types import PluginResult, TaskResult, TaskSnapshot, TaskState, TaskStatistic
from blockx.worker.v1 import worker_pb2 as pb

from tests.unit.adapters.grpc.test_session import Orch

KiB = 1024
BUDGET = 16 * KiB
MAX = 64 * KiB


def done(task_id, outputs, failure=("", ""), plugins=(), state=TaskState.SUCCEEDED):
    r = TaskResult(state, failure[0], failure[1], False, list(outputs), list(plugins),
                   TaskStatistic(call_count=len(outputs), calls_ms=7))
    return TaskSnapshot(task_id, "slot-3", state, r)


def numbers(n, width=0):
    return [str(i).rjust(width, "0").encode() for i in range(n)]


def wire_size(msg):
    """What the message takes in a session's framing: what the budget bounds."""
    return msg.ByteSize() + WRAP_BYTES


def page_through(pages, snap, limit=None):
    """Every page GetTaskResult gives from offset 0, as a client pages."""
    got, offset, out = [], 0, []
    while True:
        resp, _ = pages.reply(snap, "result", offset, limit)
        r = resp.result
        assert r.outputs_offset == offset and r.outputs_total == len(snap.result.outputs)
        out.append(resp)
        got.extend(r.outputs)
        offset += len(r.outputs)
        if not r.outputs_truncated:
            return got, out
        if not r.outputs:
            limit = 1 if limit is None else limit


# ---- the request --------------------------------------------------------------------


def test_offset_and_limit_of_a_request():
    assert page_request(pb.GetTaskResultRequest(task_id="t")) == (0, None)
    assert page_request(pb.GetTaskResultRequest(task_id="t", outputs_offset=5, outputs_limit=2)) == (5, 2)


@pytest.mark.parametrize("req, says", [
    (pb.GetTaskResultRequest(task_id="t", outputs_limit=0),
     "outputs_limit is 0: it must be at least 1, or left unset for as many outputs as fit one page "
     "(resultPageBytes (RESULT_PAGE_BYTES) on the worker)"),
    (pb.GetTaskResultRequest(task_id="t", outputs_limit=-3), "outputs_limit is -3: it must be at least 1"),
    (pb.GetTaskResultRequest(task_id="t", outputs_offset=-1), "outputs_offset is -1: it must be 0 or more"),
])
def test_a_negative_offset_and_a_limit_below_one_are_invalid_argument(req, says):
    with pytest.raises(InvalidArgumentError) as ei:
        page_request(req)
    assert ei.value.grpc_status_name == "INVALID_ARGUMENT" and ei.value.message.startswith(says)


# ---- the arithmetic -----------------------------------------------------------------


def test_output_cost_is_what_protobuf_adds_for_one_output():
    for n in (0, 1, 127, 128, 16383, 16384, 2 ** 21 - 1, 2 ** 21):
        r = pb.TaskResult(outputs=[b"x" * n])
        assert output_cost(n) == r.ByteSize(), n


def test_fit_count_stops_before_the_output_that_would_pass_the_room():
    outs = [b"a" * 10, b"b" * 10, b"c" * 10]          # 12 bytes each on the wire
    assert fit_count(outs, 0, 36) == (3, 36)          # exactly full
    assert fit_count(outs, 0, 35) == (2, 24)          # one byte short: the third does not fit
    assert fit_count(outs, 1, 100) == (2, 24)
    assert fit_count(outs, 0, 100, limit=1) == (1, 12)
    assert fit_count(outs, 3, 100) == (0, 0)
    assert fit_count(outs, 0, 11) == (0, 0)           # not even the first


def naive_fit(outputs, offset, room, limit=None):
    end = len(outputs) if limit is None else min(len(outputs), offset + limit)
    used, i = 0, offset
    while i < end and used + output_cost(len(outputs[i])) <= room:
        used += output_cost(len(outputs[i]))
        i += 1
    return i - offset, used


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 5000), big_at=st.integers(0, 5000), offset=st.integers(0, 100),
       room=st.integers(0, 40_000), limit=st.one_of(st.none(), st.integers(1, 4000)))
def test_fit_count_by_blocks_is_the_one_by_one_count(n, big_at, offset, room, limit):
    outs = [b"%d" % i for i in range(n)]
    if big_at < n:
        outs[big_at] = b"y" * 200                       # a block with an output of 3 bytes of framing
    offset = min(offset, n)
    assert fit_count(outs, offset, room, limit) == naive_fit(outs, offset, room, limit)


def test_a_small_result_is_the_encoder_own_reply_whole():
    pages = ResultPages(BUDGET, MAX)
    snap = done("t", numbers(10))
    resp, size = pages.reply(snap, "result")
    assert resp == wire.result_response(snap)
    assert (list(resp.result.outputs), resp.result.outputs_total, resp.result.outputs_truncated,
            resp.result.outputs_offset) == (numbers(10), 10, False, 0)
    assert size == bulk_bytes(snap.result)


def test_pages_fill_the_budget_and_never_pass_it():
    pages = ResultPages(BUDGET, MAX)
    snap = done("t", numbers(20_000, 5))
    got, out = page_through(pages, snap)
    assert got == snap.result.outputs                       # in order, none missing, none twice
    assert len(out) > 3
    for resp in out:
        assert wire_size(resp) <= BUDGET
    for resp in out[:-1]:                                   # full: the next output would not have fit
        nxt = snap.result.outputs[resp.result.outputs_offset + len(resp.result.outputs)]
        assert wire_size(resp) + output_cost(len(nxt)) > BUDGET - _GROWTH
        assert resp.result.outputs_truncated
    last = out[-1].result
    assert not last.outputs_truncated and last.outputs_offset + len(last.outputs) == 20_000
    # every page carries the rest of the result whole
    assert {(r.result.state, r.result.statistic.call_count, r.result.statistic.calls_ms) for r in out} == {
        (pb.TASK_STATE_SUCCEEDED, 20_000, 7)}


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 20_000), max_size=60), budget=st.integers(16 * KiB, 40 * KiB),
       limit=st.one_of(st.none(), st.integers(1, 7)))
def test_paging_any_result_returns_every_output_in_order_within_the_budget(sizes, budget, limit):
    pages = ResultPages(budget, MAX)
    snap = done("t", [bytes([65 + i % 26]) * n for i, n in enumerate(sizes)])
    got, out = page_through(pages, snap, limit)
    assert got == snap.result.outputs
    for resp in out:
        r = resp.result
        assert limit is None or len(r.outputs) <= limit
        assert wire_size(resp) <= budget or len(r.outputs) == 1     # over only for one output asked by count
        assert wire_size(resp) <= MAX


def test_the_budget_counts_failure_message_plugin_details_and_statistic():
    pages = ResultPages(BUDGET, MAX)
    plain = done("t", numbers(5_000, 5))
    heavy = done("t", numbers(5_000, 5), failure=("CALL_FAILED", "m" * 3000),
                 plugins=[PluginResult("log", True, "ok", b"d" * 5000)], state=TaskState.FAILED)
    p1 = pages.reply(plain, "result")[0].result
    p2 = pages.reply(heavy, "result")[0].result
    assert len(p2.outputs) < len(p1.outputs) - 600        # 8000 bytes less room: ~1000 fewer 7-byte outputs
    assert p2.failure_message == "m" * 3000 and p2.plugin_results[0].details == b"d" * 5000
    assert wire_size(pages.reply(heavy, "result")[0]) <= BUDGET


def test_an_offset_at_the_end_is_an_empty_last_page_and_past_it_invalid_argument():
    pages = ResultPages(BUDGET, MAX)
    snap = done("t", numbers(10))
    r = pages.reply(snap, "result", 10)[0].result
    assert (list(r.outputs), r.outputs_total, r.outputs_offset, r.outputs_truncated) == ([], 10, 10, False)
    r = pages.reply(snap, "result", 4, 3)[0].result
    assert (list(r.outputs), r.outputs_offset, r.outputs_truncated) == (numbers(10)[4:7], 4, True)
    with pytest.raises(InvalidArgumentError) as ei:
        pages.reply(snap, "result", 11)
    assert ei.value.message == ("outputs_offset 11 is past the end of task 't''s 10 outputs (outputs_total): "
                                "ask for an offset from 0 to 10")


def test_a_task_without_a_result_yet_answers_its_state_whatever_the_offset():
    pages = ResultPages(BUDGET, MAX)
    snap = TaskSnapshot("t", "slot-1", TaskState.RUNNING)
    resp, size = pages.reply(snap, "result", 5, 2)
    assert (resp.state, resp.HasField("result"), size) == (pb.TASK_STATE_RUNNING, False, 0)


# ---- one output over the budget, or over one message ----------------------------------


def test_one_output_over_the_budget_a_page_without_it_then_by_count_alone():
    pages = ResultPages(BUDGET, MAX)
    outs = [b"1", b"2", b"x" * (BUDGET + 10), b"4"]
    snap = done("t", outs)
    first = pages.reply(snap, "result")[0].result
    assert (list(first.outputs), first.outputs_truncated) == ([b"1", b"2"], True)
    at = pages.reply(snap, "result", 2)[0].result             # as much as fits: none
    assert (list(at.outputs), at.outputs_offset, at.outputs_truncated, at.outputs_total) == ([], 2, True, 4)
    big = pages.reply(snap, "result", 2, 1)[0]                # asked for by count: that one, over the budget
    assert list(big.result.outputs) == [outs[2]] and BUDGET < wire_size(big) <= MAX
    assert big.result.outputs_truncated
    assert page_through(pages, snap)[0] == outs
    upd, _ = pages.update_page(wire.task_update(snap), snap)  # an update is never over the budget
    assert list(upd.result.outputs) == [b"1", b"2"] and wire_size(upd) <= BUDGET


def test_one_output_over_one_message_is_resource_exhausted_naming_the_setting():
    pages = ResultPages(BUDGET, MAX)
    outs = [b"1", b"x" * MAX, b"3"]
    snap = done("huge", outs)
    with pytest.raises(PageTooLarge) as ei:
        pages.reply(snap, "result", 1, 1)
    msg = ei.value.message
    assert ei.value.grpc_status_name == "RESOURCE_EXHAUSTED"
    assert msg.startswith("the result of task 'huge' is ") and "over the limit of 65536 bytes of one gRPC " \
        "message (grpcMaxMessageBytes (WORKER_GRPC_MAX_MESSAGE_BYTES))" in msg
    assert msg.endswith("(output 1 of its 3 alone; the other outputs page as usual, from outputs_offset 2)")
    assert list(pages.reply(snap, "result", 2)[0].result.outputs) == [b"3"]
    upd, _ = pages.update_page(wire.task_update(snap), snap)
    assert (list(upd.result.outputs), upd.result.outputs_truncated, upd.result.failure_code) == ([b"1"], True, "")


# ---- plugin details over the budget -----------------------------------------------------


def test_plugin_details_over_the_budget_are_left_out_flagged_and_the_outputs_still_page():
    pages = ResultPages(BUDGET, MAX)
    snap = done("p", numbers(3000, 4), failure=("PLUGIN_FAILED", "bad rows"),
                plugins=[PluginResult("tableUpserts", False, "m" * 5000, b"d" * (BUDGET * 2))],
                state=TaskState.FAILED)
    got, out = page_through(pages, snap)
    assert got == snap.result.outputs
    for resp in out:
        r = resp.result
        assert wire_size(resp) <= BUDGET
        assert r.failure_code == RESULT_TOO_LARGE and r.state == pb.TASK_STATE_FAILED
        assert r.failure_message.startswith("the result of task 'p' is ") and "resultPageBytes" in r.failure_message
        assert r.failure_message.endswith(". The task's own failure was PLUGIN_FAILED: bad rows")
        assert [(p.plugin, p.ok, len(p.message), p.details) for p in r.plugin_results] == [
            ("tableUpserts", False, 1024, b"")]


# ---- updates and the other replies -------------------------------------------------------


def test_an_update_that_fits_is_the_shared_one_and_a_big_one_its_first_page_made_once():
    pages = ResultPages(BUDGET, MAX)
    small = done("s", [b"1"])
    upd = wire.task_update(small)
    assert pages.update_page(upd, small) == (upd, bulk_bytes(small.result))
    big = done("b", numbers(10_000, 6))
    upd = wire.task_update(big)
    upd.progress.calls_total = 10_000
    page, size = pages.update_page(upd, big)
    assert page is not upd and len(upd.result.outputs) == 10_000      # the shared update is unchanged
    assert (page.task_id, page.state, page.is_terminal, page.progress.calls_total) == (
        "b", pb.TASK_STATE_SUCCEEDED, True, 10_000)
    r = page.result
    assert list(r.outputs) == big.result.outputs[:len(r.outputs)] and r.outputs_truncated
    assert (r.outputs_total, r.outputs_offset) == (10_000, 0)
    assert wire_size(page) <= size <= BUDGET
    assert pages.update_page(upd, big)[0] is page                    # the next subscriber gets the same
    running = TaskSnapshot("r", "slot-0", TaskState.RUNNING)
    u = wire.task_update(running)
    assert pages.update_page(u, running) == (u, 0)


@pytest.mark.parametrize("kind, field", [("slot", "slot_id"), ("submit", "state")])
def test_slot_and_submit_replies_of_a_finished_task_carry_its_first_page(kind, field):
    pages = ResultPages(BUDGET, MAX)
    big = done("b", numbers(10_000, 6))
    resp, _ = pages.reply(big, kind)
    assert wire_size(resp) <= BUDGET and resp.result.outputs_truncated and resp.result.outputs_total == 10_000
    assert getattr(resp, field) == ({"slot_id": "slot-3", "state": pb.TASK_STATE_SUCCEEDED}[field])


def test_the_budget_must_leave_room_under_one_message():
    with pytest.raises(ValueError):
        ResultPages(MAX, MAX)


# ---- on a session -------------------------------------------------------------------------


def session(snaps):
    counted = []
    o = Orch(snaps)
    s = Session(o, wire.TaskUpdateEncoder(), lambda m, c: counted.append((m, c)), delivery=ResultPages(BUDGET, MAX))
    return s, o, counted


def get(rid, tid, **kw):
    return pb.SessionRequest(request_id=rid, get_result=pb.GetTaskResultRequest(task_id=tid, **kw))


async def test_on_a_session_get_result_pages_and_bad_pages_are_errors_for_that_request_alone():
    big = done("big", [b"1", b"x" * MAX, b"3"])
    s, _, counted = session({"big": big, "small": done("small", [b"42"])})
    s.handle(pb.SessionRequestBatch(requests=[
        get(1, "big"), get(2, "big", outputs_offset=1, outputs_limit=1), get(3, "big", outputs_limit=0),
        get(4, "big", outputs_offset=9), get(5, "big", outputs_offset=2), get(6, "small")]))
    evs = []
    while len(evs) < 6:
        evs += await s.next_batch()
    kinds = [(e.request_id, e.WhichOneof("event")) for e in evs]
    assert kinds == [(1, "result"), (2, "error"), (3, "error"), (4, "error"), (5, "result"), (6, "result")]
    assert list(evs[0].result.result.outputs) == [b"1"] and evs[0].result.result.outputs_truncated
    assert evs[1].error.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert "grpcMaxMessageBytes" in evs[1].error.message
    assert evs[2].error.code == evs[3].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "outputs_limit is 0" in evs[2].error.message and "outputs_offset 9 is past" in evs[3].error.message
    assert list(evs[4].result.result.outputs) == [b"3"] and not evs[4].result.result.outputs_truncated
    assert list(evs[5].result.result.outputs) == [b"42"]
    assert counted == [("TaskSession/get_result", c) for c in
                       ("OK", "RESOURCE_EXHAUSTED", "INVALID_ARGUMENT", "INVALID_ARGUMENT", "OK", "OK")]
    assert s.end is None


async def test_on_a_session_watched_huge_results_arrive_as_first_pages_each_batch_within_the_budget():
    ids = [f"t{i}" for i in range(6)]
    s, o, _ = session({t: TaskSnapshot(t, "slot-0", TaskState.RUNNING) for t in ids})
    s.handle(pb.SessionRequestBatch(requests=[pb.SessionRequest(request_id=1, watch=pb.WatchTasksRequest(task_ids=ids))]))
    assert len(await s.next_batch()) == 6
    for t in ids:
        o.subscriptions.publish(done(t, numbers(20_000, 6)))
    evs = []
    while len(evs) < 6:
        batch = await s.next_batch()
        assert pb.SessionEventBatch(events=batch).ByteSize() <= BUDGET
        evs += batch
    for e, t in zip(evs, ids):
        r = e.update.result
        assert (e.update.task_id, e.update.is_terminal, r.outputs_total, r.outputs_truncated) == (t, True, 20_000, True)
        assert r.failure_code == ""
    s.eof()
    assert await s.next_batch() is None


def test_a_result_that_takes_the_fast_path_fits_even_with_the_longest_ids_and_progress():
    from blockx.adapters.grpc.result_pages import FAST_SLACK_BYTES
    pages = ResultPages(BUDGET, MAX)
    tid = "t" * 256
    outs = numbers(100, 3)
    pad = BUDGET - FAST_SLACK_BYTES - bulk_bytes(TaskResult(TaskState.FAILED, outputs=outs))
    snap = done(tid, outs, failure=("WORKER_SHUTDOWN", "m" * pad), state=TaskState.FAILED)
    snap.result.statistic = TaskStatistic(*([2 ** 62] * 9))
    assert bulk_bytes(snap.result) == BUDGET - FAST_SLACK_BYTES
    upd = wire.task_update(snap)
    upd.progress.calls_total = upd.progress.calls_done = upd.progress.calls_failed = upd.progress.calls_retried = 2 ** 62
    assert pages.update_page(upd, snap)[0] is upd
    ev = pb.SessionEvent(request_id=2 ** 63, update=upd)
    assert pb.SessionEventBatch(events=[ev]).ByteSize() <= BUDGET
    for kind in ("slot", "submit", "result"):
        resp = pages.reply(snap, kind)[0]
        assert list(resp.result.outputs) == outs and wire_size(resp) <= BUDGET
