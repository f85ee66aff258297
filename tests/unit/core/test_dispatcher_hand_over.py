"""hand_over: a streaming task whose outputs leave the dispatcher with each
BatchSettled (a writer consumes them as the task runs), so the core holds the
outputs of unsettled batches only."""
from blockx.core.dispatcher_commands import BatchSettled
from blockx.core.dispatcher_config import DispatcherConfig

from tests.unit.core.test_dispatcher_harness import Harness, spec


def _stream(h, task_id="t", policy="FAST_FAIL", hand_over=True):
    h.feed(h.core.commit_call_stream(task_id, policy, None, "", h.now, hand_over=hand_over))


def _batch(h, idx, calls, task_id="t"):
    p = h.core.prepare_call_batch(task_id, idx, calls)
    return h.feed(h.core.commit_call_batch(p, h.now))


def _task(h, task_id="t"):
    return h.core._tasks.by_id[task_id]


def test_settled_batches_carry_their_outputs_in_call_order_and_the_core_keeps_none():
    h = Harness(contexts=10)
    _stream(h)
    _batch(h, 0, [spec("f", 0), spec("f", 1), spec("f", 2)])
    _batch(h, 1, [spec("f", 3)])
    h.complete("t/1.0", output=b"3")
    assert h.settled == [BatchSettled("t", 1, [b"3"])]
    h.complete("t/0.2", output=b"2")
    h.complete("t/0.0", output=b"0")
    h.complete("t/0.1", output=b"1")
    assert h.settled[-1] == BatchSettled("t", 0, [b"0", b"1", b"2"])
    task = _task(h)
    assert task.output_bytes == 0 and task.cache == {}
    assert [o for o in task.outputs if o is not None] == []
    h.feed(h.core.production_done("t", h.now))
    c = h.converged["t"]
    assert c.ok and c.outputs == [] and c.call_count == 4


def test_without_hand_over_batches_carry_nothing_and_outputs_stay():
    h = Harness(contexts=10)
    _stream(h, hand_over=False)
    _batch(h, 0, [spec("f", 0)])
    h.complete("t/0.0", output=b"0")
    assert h.settled == [BatchSettled("t", 0, None)]
    h.feed(h.core.production_done("t", h.now))
    assert h.converged["t"].outputs == [b"0"]


def test_failed_roots_are_left_out_under_continue():
    h = Harness(contexts=10)
    _stream(h, policy="CONTINUE")
    _batch(h, 0, [spec("f", 0), spec("f", 1)])
    h.fail("t/0.0")
    h.complete("t/0.1", output=b"1")
    assert h.settled == [BatchSettled("t", 0, [b"1"])]


def test_the_output_cap_counts_only_what_the_core_still_holds():
    # 3 batches of 6 bytes each under a 10-byte cap: each batch leaves before the
    # next one arrives, so the task never holds more than 6 bytes and succeeds.
    h = Harness(DispatcherConfig(max_collected_output_bytes=10), contexts=10)
    _stream(h)
    for i in range(3):
        _batch(h, i, [spec("f", i)])
        h.complete(f"t/{i}.0", output=b"123456")
    h.feed(h.core.production_done("t", h.now))
    assert h.converged["t"].ok
    assert [len(b.outputs) for b in h.settled] == [1, 1, 1]


def test_a_cancelled_task_forgets_its_hand_over():
    h = Harness(contexts=10)
    _stream(h)
    _batch(h, 0, [spec("f", 0)])
    h.feed(h.core.cancel_task("t", "timed out", h.now))
    assert "t" not in h.core._tasks._hand_over
    # the same id again, as a plain stream: its outputs stay in the core
    _stream(h, hand_over=False)
    _batch(h, 0, [spec("f", 0)])
    h.complete("t/0.0", output=b"0")
    assert h.settled[-1] == BatchSettled("t", 0, None)
    h.feed(h.core.production_done("t", h.now))
    assert h.converged["t"].outputs == [b"0"]


def test_later_batches_reuse_the_output_slots_of_settled_ones():
    h = Harness(contexts=10)
    _stream(h)
    for i in range(50):
        _batch(h, i, [spec("f", i, j) for j in range(4)])
        for j in (3, 1, 0, 2):
            h.complete(f"t/{i}.{j}", output=b"%d" % (i * 4 + j))
        assert h.settled[-1] == BatchSettled("t", i, [b"%d" % (i * 4 + j) for j in range(4)])
    assert len(_task(h).outputs) == 4                     # one batch's slots, not 200
    # a smaller last batch fits in the freed slots; two batches in flight take two regions
    _batch(h, 50, [spec("g", 0), spec("g", 1)])
    _batch(h, 51, [spec("g", 2), spec("g", 3), spec("g", 4), spec("g", 5)])
    assert len(_task(h).outputs) == 8
    for cid, out in (("t/51.0", b"a"), ("t/50.1", b"y"), ("t/51.3", b"d"), ("t/51.2", b"c"),
                     ("t/50.0", b"x"), ("t/51.1", b"b")):
        h.complete(cid, output=out)
    assert h.settled[-2:] == [BatchSettled("t", 50, [b"x", b"y"]), BatchSettled("t", 51, [b"a", b"b", b"c", b"d"])]
    h.feed(h.core.production_done("t", h.now))
    c = h.converged["t"]
    assert c.ok and c.outputs == [] and c.call_count == 206
