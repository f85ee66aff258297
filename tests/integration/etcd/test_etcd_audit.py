"""Audit approvals from etcd (/blockx/audit/<digest> = approval id), real etcd."""

from __future__ import annotations

import asyncio

import aetcd

from blockx.adapters.audit import AuditGate, EtcdAuditAllowlist
from blockx.adapters.etcd_tls import etcd_client
from tests.integration.etcd.helpers import eventually

D1, D2 = "c" * 64, "d" * 64


async def _async(v):
    return v


async def test_an_approval_put_at_run_time_is_picked_up_by_the_next_refresh(etcd_server):
    writer = aetcd.Client(*etcd_server.host_port, timeout=2)
    await writer.put(f"/blockx/audit/{D1}".encode(), b"CR-7")
    source = EtcdAuditAllowlist(etcd_client(*etcd_server.host_port, timeout=2), "/blockx/audit/")
    gate = AuditGate("enforce", None, etcd=source)
    try:
        assert await source.fetch() is True
        assert gate.check("add", D1) == ("CR-7", "")
        assert gate.check("sq", D2)[1].startswith("function 'sq' code digest")
        await writer.put(f"/blockx/audit/{D2}".encode(), b"")
        gate.refresh()
        await eventually(lambda: _async(D2 in source.approved), what="the new approval")
        assert gate.check("sq", D2) == (D2[:12], "")
        # etcd away: the list is kept (and the gate keeps refusing what it never saw).
        await etcd_server.astop()
        assert await source.fetch() is False
        assert gate.check("add", D1) == ("CR-7", "")
    finally:
        await source.close()
        await writer.close()


async def test_after_an_outage_the_allowlist_reads_again_as_soon_as_etcd_is_back(etcd_server):
    # The Worker's ticker retries the read while etcd is away. A channel kept across
    # those failures sits in gRPC's reconnect backoff (1 s, 1.6 s, 2.6 s, 4.1 s...)
    # and refuses calls until its next attempt, long after etcd is back.
    source = EtcdAuditAllowlist(etcd_client(*etcd_server.host_port, timeout=2), "/blockx/audit/")
    try:
        assert await source.fetch() is True
        await etcd_server.astop()
        loop = asyncio.get_running_loop()
        until = loop.time() + 6.0
        while loop.time() < until:
            assert await source.fetch() is False
            await asyncio.sleep(0.2)
        await etcd_server.astart()
        # its own subchannels: gRPC shares them between channels with the same settings
        async with aetcd.Client(*etcd_server.host_port, timeout=2,
                                options={"grpc.use_local_subchannel_pool": 1}) as writer:
            await writer.put(f"/blockx/audit/{D1}".encode(), b"CR-8")
        back = loop.time()
        while not await source.fetch():
            assert loop.time() - back < 2.0, "etcd is back but the allowlist still cannot read it"
            await asyncio.sleep(0.1)
        assert source.approved == {D1: "CR-8"}
    finally:
        await source.close()
