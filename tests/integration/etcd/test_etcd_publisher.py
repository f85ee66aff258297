"""EtcdPublisher against a real etcd server (tests/support/etcd.py)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import aetcd
import pytest

from blockx.adapters.etcd_publisher import HEARTBEAT_FIELDS, EtcdPublisher, PublisherState
from blockx.adapters.telemetry.metrics import Metrics
from tests.support.etcd import EtcdServer, free_port

from .helpers import TcpProxy, capture_logger, eventually, read_value

PREFIX = "/blockx/workers/"
ADDR = "10.1.2.3:8081"
KEY = (PREFIX + ADDR).encode()

pytestmark = pytest.mark.timeout(60)


def make_heartbeat(**over) -> dict:
    hb = {
        "workerAddr": ADDR, "deployment": "block", "version": "0.1.0",
        "taskSlots": 50, "freeSlots": 48, "reservedSlots": 1, "runningTasks": 1,
        "executorsHealthy": 8, "executorsTotal": 8, "draining": False, "ready": True,
        "startedAtMs": 1_700_000_000_000,
    }
    hb.update(over)
    return hb


class HB:
    """A mutable heartbeat source, as WorkerCore.derive_heartbeat would be."""

    def __init__(self, **over) -> None:
        self.value = make_heartbeat(**over)
        self.fail = False

    def __call__(self) -> dict:
        if self.fail:
            raise RuntimeError("derive_heartbeat exploded")
        return dict(self.value)


def publisher(endpoints, hb, **kw) -> EtcdPublisher:
    logger, handler = capture_logger()
    kw.setdefault("interval_ms", 50)
    p = EtcdPublisher(endpoints, PREFIX, ADDR, hb, logger=logger, **kw)
    p.test_log = handler  # type: ignore[attr-defined]
    return p


@pytest.fixture
async def observer(etcd_server: EtcdServer):
    client = aetcd.Client(*etcd_server.host_port, timeout=2)
    yield client
    await client.close()


async def test_registers_key_with_heartbeat_json_on_a_lease(etcd_server, observer):
    metrics = Metrics(process_metrics=False)
    p = publisher([etcd_server.endpoint], HB(), metrics=metrics)
    assert p.state == PublisherState.IDLE
    await p.start()  # returns at once; registration runs in the background
    try:
        value, lease = await eventually(lambda: read_value(observer, KEY), what="registration")
        assert set(HEARTBEAT_FIELDS) <= set(value)
        assert value["workerAddr"] == ADDR and value["taskSlots"] == 50 and value["ready"] is True
        assert value["seq"] >= 1 and value["updatedAtMs"] > 1_700_000_000_000
        assert lease != 0 and lease == p.lease_id
        info = await observer.get_lease_info(lease)
        assert 0 < info.TTL <= 10 and info.grantedTTL == 10
        assert KEY in list(info.keys)
        await eventually(lambda: _async(p.state == PublisherState.REGISTERED), what="registered state")
        assert metrics.etcd_state == "registered"
        assert metrics.etcd_registrations == 1
        assert b'blockx_etcd_registration_state{state="registered"} 1.0' in metrics.render()
        assert [r.fields["key"] for r in p.test_log.events("etcd_registered")] == [KEY.decode()]
    finally:
        await p.deregister()


async def test_value_follows_heartbeat_fn_and_seq_advances(etcd_server, observer):
    hb = HB()
    p = publisher([etcd_server.endpoint], hb)
    await p.start()
    try:
        first, lease = await eventually(lambda: read_value(observer, KEY), what="registration")
        hb.value.update(freeSlots=10, runningTasks=39, draining=True, ready=False)

        async def updated():
            got = await read_value(observer, KEY)
            return got if got and got[0]["freeSlots"] == 10 else None

        second, lease2 = await eventually(updated, what="updated heartbeat")
        assert second["runningTasks"] == 39 and second["draining"] is True and second["ready"] is False
        assert second["seq"] > first["seq"]
        assert second["updatedAtMs"] >= first["updatedAtMs"]
        assert lease2 == lease  # refreshed, not re-registered
    finally:
        await p.deregister()


async def test_publisher_fills_in_missing_fields_but_keeps_given_ones(etcd_server, observer):
    p = publisher([etcd_server.endpoint], lambda: {"taskSlots": 3})
    await p.start()
    try:
        value, _ = await eventually(lambda: read_value(observer, KEY), what="registration")
        assert value["workerAddr"] == ADDR and value["taskSlots"] == 3
        assert isinstance(value["seq"], int) and isinstance(value["updatedAtMs"], int)
    finally:
        await p.deregister()
    p2 = publisher([etcd_server.endpoint], lambda: {"seq": 777, "updatedAtMs": 5, "workerAddr": "x:1"})
    await p2.start()
    try:
        value, _ = await eventually(lambda: read_value(observer, KEY), what="registration")
        assert (value["seq"], value["updatedAtMs"], value["workerAddr"]) == (777, 5, "x:1")
    finally:
        await p2.deregister()


async def test_deregister_deletes_key_and_revokes_lease(etcd_server, observer):
    metrics = Metrics(process_metrics=False)
    p = publisher([etcd_server.endpoint], HB(), metrics=metrics)
    await p.start()
    _, lease = await eventually(lambda: read_value(observer, KEY), what="registration")
    loop_task = p._task
    await p.deregister()
    assert await observer.get(KEY) is None
    assert (await observer.get_lease_info(lease)).TTL == -1  # revoked: etcd reports -1
    assert p.state == PublisherState.DEREGISTERED and metrics.etcd_state == "deregistered"
    assert p.test_log.events("etcd_deregistered")
    # Nothing comes back: the loop really stopped.
    assert loop_task.done() and p._task is None
    await p.deregister()  # idempotent
    await p.stop()


@pytest.mark.parametrize("when", ["after_registering", "before_ever_starting"])
async def test_a_start_after_deregister_never_registers_again(etcd_server, observer, when):
    # The ready path of a worker that is already draining (a SIGTERM landed while
    # it awaited) calls start() after deregister(): the key must not come back to
    # linger for the lease TTL.
    p = publisher([etcd_server.endpoint], HB(draining=True, ready=False))
    if when == "after_registering":
        await p.start()
        await eventually(lambda: read_value(observer, KEY), what="registration")
    await p.deregister()
    assert await observer.get(KEY) is None
    await p.start()
    await asyncio.sleep(0.5)                   # ten heartbeat intervals
    assert await observer.get(KEY) is None
    assert p.state == PublisherState.DEREGISTERED and p._task is None
    assert [r.fields["key"] for r in p.test_log.events("etcd_start_refused")] == [KEY.decode()]
    await p.stop()


async def test_a_start_after_stop_never_registers_again(etcd_server, observer):
    p = publisher([etcd_server.endpoint], HB())
    await p.stop()
    await p.start()
    await asyncio.sleep(0.3)
    assert await observer.get(KEY) is None and p._task is None


async def test_stop_without_deregister_leaves_key_to_expire(etcd_server, observer):
    p = publisher([etcd_server.endpoint], HB(), lease_ttl_s=5)
    await p.start()
    _, lease = await eventually(lambda: read_value(observer, KEY), what="registration")
    await p.stop()
    assert p.state == PublisherState.DEREGISTERED
    got = await read_value(observer, KEY)
    assert got is not None and got[1] == lease
    info = await observer.get_lease_info(lease)
    assert 0 < info.TTL <= 5


async def test_revoked_lease_leads_to_reregistration(etcd_server, observer):
    metrics = Metrics(process_metrics=False)
    p = publisher([etcd_server.endpoint], HB(), metrics=metrics)
    await p.start()
    try:
        _, lease = await eventually(lambda: read_value(observer, KEY), what="registration")
        await observer.revoke_lease(lease)  # as an operator (or an expiry) would

        async def new_lease():
            got = await read_value(observer, KEY)
            return got if got and got[1] != lease else None

        _, lease2 = await eventually(new_lease, what="re-registration under a new lease")
        assert lease2 == p.lease_id
        assert (await observer.get_lease_info(lease2)).TTL > 0
        assert p.test_log.events("etcd_lease_lost")
        assert metrics.etcd_registrations >= 2
        await eventually(lambda: _async(p.state == PublisherState.REGISTERED), what="registered state")
    finally:
        await p.deregister()


async def test_etcd_outage_then_recovery(etcd_server, observer):
    metrics = Metrics(process_metrics=False)
    p = publisher([etcd_server.endpoint], HB(), metrics=metrics,
                  backoff_initial_ms=50, backoff_max_ms=400, error_log_interval_s=1.0)
    await p.start()
    try:
        before, _ = await eventually(lambda: read_value(observer, KEY), what="registration")
        await etcd_server.astop()
        await eventually(lambda: _async(p.state == PublisherState.RETRYING), what="retrying state")
        await eventually(lambda: _async(metrics.etcd_errors >= 5), timeout=10,
                         what="several failed cycles")
        assert not p._task.done()  # no exception escaped the background loop
        assert p.state == PublisherState.RETRYING and metrics.etcd_state == "retrying"
        failures = metrics.etcd_errors
        warnings = p.test_log.events("etcd_unavailable")
        assert failures >= 5
        assert 1 <= len(warnings) < failures  # rate-limited
        assert "ConnectionFailedError" in warnings[0].fields["error"]
        assert p.last_error

        await etcd_server.astart()

        async def fresh():
            got = await read_value(observer, KEY)
            return got if got and got[0]["seq"] > before["seq"] else None

        after, lease = await eventually(fresh, what="heartbeats after the outage")
        assert lease == p.lease_id and (await observer.get_lease_info(lease)).TTL > 0
        await eventually(lambda: _async(p.state == PublisherState.REGISTERED), what="registered state")
        assert p.test_log.events("etcd_recovered")
        assert not p._task.done()
    finally:
        await p.deregister()
    assert await observer.get(KEY) is None


async def test_partition_longer_than_ttl_reregisters_with_a_new_lease(etcd_server, observer):
    # etcd stays up while the Worker cannot reach it, so the lease (TTL 2 s)
    # expires and the key vanishes; after the partition heals the refresh answers
    # TTL <= 0 and the publisher must register again under a new lease.
    proxy = await TcpProxy(etcd_server.host_port).start()
    p = publisher([proxy.endpoint], HB(), lease_ttl_s=2, backoff_initial_ms=50, backoff_max_ms=200)
    await p.start()
    try:
        _, lease = await eventually(lambda: read_value(observer, KEY), what="registration")
        await proxy.cut()
        await eventually(lambda: _async_not(read_value(observer, KEY)), timeout=10,
                         what="key expiring with its lease")
        assert p.state == PublisherState.RETRYING and p.lease_id == lease
        await proxy.heal()
        got = await eventually(lambda: read_value(observer, KEY), what="key back")
        assert got[1] == p.lease_id != lease
        assert p.test_log.events("etcd_lease_lost")
        await eventually(lambda: _async(p.state == PublisherState.REGISTERED), what="registered")
    finally:
        await p.deregister()
        await proxy.cut()


async def test_unreachable_at_start_keeps_retrying_without_blocking_the_loop():
    port = free_port()
    p = publisher([f"127.0.0.1:{port}"], HB(), backoff_initial_ms=20, backoff_max_ms=100,
                  error_log_interval_s=60.0)
    ticks, gap = await _with_ticker(p.start(), 1.5)
    try:
        # It cycles RETRYING (backing off) -> REGISTERING (the next attempt), so
        # the state sampled at one instant may be either; what proves it keeps
        # retrying is the failure count, still climbing, and the live task.
        assert p.state in (PublisherState.RETRYING, PublisherState.REGISTERING)
        assert not p._task.done() and p.last_error
        seen = p._failures
        assert seen >= 2
        await eventually(lambda: _async(p._failures > seen), what="another failed attempt")
        assert ticks > 30 and gap < 0.5
        assert len(p.test_log.events("etcd_unavailable")) == 1  # once per interval_s
        # etcd appears later on that very port: the publisher registers by itself.
        with EtcdServer(client_port=port) as etcd:
            client = aetcd.Client(*etcd.host_port, timeout=2)
            try:
                await eventually(lambda: read_value(client, KEY), what="late registration")
                await eventually(lambda: _async(p.state == PublisherState.REGISTERED), what="registered")
                await p.deregister()
                assert await client.get(KEY) is None
            finally:
                await client.close()
    finally:
        await p.stop()


async def test_silent_endpoint_times_out_and_deregister_is_bounded():
    # Accepts TCP but never speaks HTTP/2: every RPC must end by its deadline.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        endpoint = "127.0.0.1:%d" % silent.getsockname()[1]
        p = publisher([endpoint], HB(), call_timeout_ms=200, backoff_initial_ms=20,
                      backoff_max_ms=100, deregister_timeout_ms=300)
        ticks, gap = await _with_ticker(p.start(), 1.5)
        assert p.state in (PublisherState.RETRYING, PublisherState.REGISTERING)
        assert not p._task.done()
        assert ticks > 30 and gap < 0.5
        assert "timed out" in (p.last_error or "").lower() or "deadline" in (p.last_error or "").lower()
        t0 = time.monotonic()
        await p.deregister()
        await p.stop()
        assert time.monotonic() - t0 < 5.0  # bounded by the timeouts, not by etcd
        assert p.state == PublisherState.DEREGISTERED


async def test_deregister_while_etcd_is_down_returns_and_logs(etcd_server, observer):
    p = publisher([etcd_server.endpoint], HB(), deregister_timeout_ms=500)
    await p.start()
    await eventually(lambda: read_value(observer, KEY), what="registration")
    await etcd_server.astop()
    t0 = time.monotonic()
    await p.deregister()  # must not raise
    assert time.monotonic() - t0 < 5.0
    assert p.state == PublisherState.DEREGISTERED
    assert p.test_log.events("etcd_deregister_failed")


async def test_deregister_against_a_hung_etcd_is_bounded(etcd_server, observer):
    # The connection stays up but nothing answers: only deadlines end the calls.
    proxy = await TcpProxy(etcd_server.host_port).start()
    p = publisher([proxy.endpoint], HB(), call_timeout_ms=300, deregister_timeout_ms=500)
    await p.start()
    try:
        _, lease = await eventually(lambda: read_value(observer, KEY), what="registration")
        proxy.frozen = True
        t0 = time.monotonic()
        await p.deregister()
        assert time.monotonic() - t0 < 5.0
        assert p.state == PublisherState.DEREGISTERED
        assert p.test_log.events("etcd_deregister_failed")
        assert (await read_value(observer, KEY))[1] == lease  # left to expire with its lease
    finally:
        await proxy.cut()


async def test_failing_heartbeat_fn_keeps_last_good_value(etcd_server, observer):
    hb = HB()
    p = publisher([etcd_server.endpoint], hb)
    await p.start()
    try:
        first, lease = await eventually(lambda: read_value(observer, KEY), what="registration")
        hb.fail = True

        async def later():
            got = await read_value(observer, KEY)
            return got if got and got[0]["seq"] > first["seq"] + 3 else None

        value, lease2 = await eventually(later, what="heartbeats continuing")
        assert lease2 == lease and value["freeSlots"] == first["freeSlots"]
        assert len(p.test_log.events("heartbeat_fn_failed")) == 1
    finally:
        await p.deregister()


async def test_publish_now_does_not_wait_for_the_interval(etcd_server, observer):
    hb = HB()
    p = publisher([etcd_server.endpoint], hb, interval_ms=30_000)
    await p.start()
    try:
        await eventually(lambda: read_value(observer, KEY), what="registration")
        hb.value["draining"] = True
        p.publish_now()

        async def draining():
            got = await read_value(observer, KEY)
            return got if got and got[0]["draining"] else None

        await eventually(draining, timeout=5, what="immediate publish")
    finally:
        await p.deregister()


@pytest.mark.parametrize("endpoints", ["none", "", None, [], ["none"], " NONE "])
async def test_disabled_publisher_does_nothing(endpoints):
    metrics = Metrics(process_metrics=False)
    calls = []
    p = EtcdPublisher(endpoints, PREFIX, "", lambda: calls.append(1) or {}, metrics=metrics)
    assert not p.enabled and p.state == PublisherState.DISABLED
    assert metrics.etcd_state == "disabled"
    await p.start()
    p.publish_now()
    assert p._task is None  # no background loop that could call the heartbeat function
    await p.deregister()
    await p.stop()
    assert p.state == PublisherState.DISABLED and p._task is None and calls == []


async def _with_ticker(coro, seconds: float) -> tuple[int, float]:
    """Run `coro`, then tick every 10 ms for `seconds`; (ticks, largest gap)."""
    await coro
    ticks, gap = 0, 0.0
    last = time.monotonic()
    end = last + seconds
    while (now := time.monotonic()) < end:
        await asyncio.sleep(0.01)
        now = time.monotonic()
        gap = max(gap, now - last)
        last = now
        ticks += 1
    return ticks, gap


async def _async(value):
    return value


async def _async_not(awaitable):
    return not await awaitable


async def test_an_outage_logs_one_warning_then_counted_reminders_then_info_when_back():
    # The reminder interval is injected (0.4 s for the minute), so the rule is seen in
    # seconds: one WARNING for the whole outage, INFO reminders carrying the count,
    # INFO when etcd is back, and a new WARNING only for a new outage.
    port = free_port()
    p = publisher([f"127.0.0.1:{port}"], HB(), backoff_initial_ms=20, backoff_max_ms=60,
                  error_log_interval_s=0.4)
    await p.start()
    try:
        await eventually(lambda: _async(len(p.test_log.events("etcd_still_unavailable")) >= 2), timeout=20,
                         what="two reminders")
        warnings = [r for r in p.test_log.records if r.levelno >= logging.WARNING]
        assert [r.event for r in warnings] == ["etcd_unavailable"], [r.getMessage() for r in warnings]
        reminders = p.test_log.events("etcd_still_unavailable")
        assert all(r.levelno == logging.INFO for r in reminders)
        counts = [r.fields["failures"] for r in reminders]
        assert counts == sorted(counts) and counts[0] >= 2 and p._failures >= counts[-1]
        assert all(r.fields["down_s"] >= 0.4 * (i + 1) - 0.05 for i, r in enumerate(reminders))
        with EtcdServer(client_port=port) as etcd:
            await eventually(lambda: _async(p.state == PublisherState.REGISTERED), timeout=20, what="registered")
            back = p.test_log.events("etcd_recovered")
            assert len(back) == 1 and back[0].levelno == logging.INFO and back[0].fields["failures"] >= counts[-1]
            await etcd.astop()
            await eventually(lambda: _async(len(p.test_log.events("etcd_unavailable")) == 2), timeout=20,
                             what="a second outage's WARNING")
    finally:
        await p.stop()
