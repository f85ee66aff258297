"""WrittenLog and Notice (the dispatch actor's ResumeCall waiters), against the
compiled module and its twin: keys in write order, one on_first per batch the
owner takes, on_lost with the call's identity, one answer per Notice, and the
waiter protocol of a real Outbox (enqueue_notify, flush, close)."""

import asyncio

import pytest

from blockx._fast import implementations, load

IMPLS = implementations("writenotice")


@pytest.fixture(params=[mod for _, mod in IMPLS], ids=[label for label, _ in IMPLS])
def wn(request):
    return request.param


class Owner:
    def __init__(self, wn):
        self.firsts = 0
        self.lost = []
        self.log = wn.WrittenLog(self.on_first, self.on_lost)

    def on_first(self):
        self.firsts += 1

    def on_lost(self, executor_id, key, attempt_seq, exc):
        self.lost.append((executor_id, key, attempt_seq, exc))


def test_written_keys_in_order_with_one_on_first_per_batch(wn):
    o = Owner(wn)
    a, b, c = (wn.Notice(o.log, k, "e1", 1) for k in ("a", "b", "c"))
    assert not a.done()
    a.set_result(None)
    b.set_result(None)
    assert a.done() and b.done() and not c.done()
    assert o.firsts == 1 and len(o.log) == 2
    assert o.log.take() == ["a", "b"]
    assert len(o.log) == 0 and o.log.take() == []
    c.set_result(None)
    assert o.firsts == 2 and o.log.take() == ["c"]
    assert o.lost == []


def test_lost_tells_the_call_and_records_nothing(wn):
    o = Owner(wn)
    n = wn.Notice(o.log, "p/1", "exec-0", 3)
    err = ConnectionResetError("gone")
    n.set_exception(err)
    assert n.done()
    assert o.lost == [("exec-0", "p/1", 3, err)]
    assert o.firsts == 0 and o.log.take() == []


def test_a_notice_answers_once(wn):
    o = Owner(wn)
    n = wn.Notice(o.log, "a", "e", 1)
    n.set_result(None)
    with pytest.raises(RuntimeError, match="already answered"):
        n.set_result(None)
    with pytest.raises(RuntimeError, match="already answered"):
        n.set_exception(OSError())
    assert o.log.take() == ["a"] and o.lost == []


def test_a_notice_needs_a_written_log(wn):
    with pytest.raises(TypeError, match="WrittenLog"):
        wn.Notice([], "a", "e", 1)


def test_the_fields_read_back(wn):
    o = Owner(wn)
    n = wn.Notice(o.log, "a", "exec-1", 7)
    assert (n.key, n.executor_id, n.attempt_seq) == ("a", "exec-1", 7)


class Transport:
    def __init__(self):
        self.writes = []

    def writelines(self, frames):
        self.writes.append(list(frames))


def test_as_the_outbox_waiter(wn):
    async def run():
        loop = asyncio.get_running_loop()
        outbox = load("outbox").Outbox(Transport(), loop, depth=8, max_batch=2)
        o = Owner(wn)
        notices = [wn.Notice(o.log, f"c{i}", "e", 1) for i in range(3)]
        for i, n in enumerate(notices):
            outbox.enqueue_notify(b"frame%d" % i, n)
        outbox.flush_now()                      # two frames: two keys, one on_first
        assert o.log.take() == ["c0", "c1"] and o.firsts == 1
        later = wn.Notice(o.log, "c3", "e", 2)
        outbox.enqueue_notify(b"frame3", later)
        outbox.close(ConnectionResetError("closed"))
        assert [x[1] for x in o.lost] == ["c2", "c3"] and o.log.take() == []
        assert all(n.done() for n in notices) and later.done()

    asyncio.run(run())
