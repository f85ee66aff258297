"""PhaseGate: a FIFO counting semaphore whose synchronous entry never overtakes a waiter."""
import asyncio

import pytest

from blockx.adapters.admission import PhaseGate


async def test_try_enter_until_full_then_waiters_in_fifo_order():
    g = PhaseGate(2)
    assert g.try_enter() and g.try_enter() and not g.try_enter()
    order = []

    async def waiter(name):
        await g.enter()
        order.append(name)

    tasks = [asyncio.ensure_future(waiter(n)) for n in "abc"]
    await asyncio.sleep(0)
    assert order == [] and g.in_use == 2
    g.release()
    assert not g.try_enter(), "a synchronous entry overtook a waiter"
    await asyncio.sleep(0)
    assert order == ["a"]
    g.release()
    g.release()
    await asyncio.sleep(0)
    assert order == ["a", "b", "c"] and g.in_use == 2
    for t in tasks:
        await t


async def test_a_cancelled_waiter_gives_its_room_on():
    g = PhaseGate(1)
    assert g.try_enter()
    first = asyncio.ensure_future(g.enter())
    second = asyncio.ensure_future(g.enter())
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    g.release()
    await asyncio.wait_for(second, 1)
    assert g.in_use == 1
    g.release()
    assert g.in_use == 0 and g.try_enter()


async def test_granted_then_cancelled_passes_the_room_to_the_next_waiter():
    g = PhaseGate(1)
    assert g.try_enter()
    first = asyncio.ensure_future(g.enter())
    second = asyncio.ensure_future(g.enter())
    await asyncio.sleep(0)
    g.release()             # grants `first` ...
    first.cancel()          # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 1)
    assert g.in_use == 1


def test_release_without_enter_is_an_error():
    g = PhaseGate(1)
    with pytest.raises(RuntimeError):
        g.release()
    with pytest.raises(ValueError):
        PhaseGate(0)
