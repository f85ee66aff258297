"""TLS towards etcd: a real etcd that requires client certificates
(--client-cert-auth), certificates made by openssl in the test."""

from __future__ import annotations

import aetcd
import pytest

from blockx.adapters.etcd_publisher import EtcdPublisher, PublisherState
from blockx.adapters.etcd_tls import etcd_client
from blockx.tls.client_tls import ClientTLS
from tests.integration.etcd.helpers import eventually, read_value
from tests.support.certs import CertAuthority
from tests.support.etcd import EtcdServer

KEY = b"/blockx/workers/10.0.0.9:8081"


@pytest.fixture
def tls_etcd(tmp_path):
    ca = CertAuthority(tmp_path, "ca")
    server, client = ca.issue("etcd-server"), ca.issue("etcd-client", server=False)
    with EtcdServer(tls=(server.cert, server.key, ca.cert)) as etcd:
        yield etcd, ca, client


async def test_publisher_registers_over_mutual_tls_and_plaintext_is_refused(tls_etcd):
    etcd, ca, client = tls_etcd
    tls = ClientTLS(ca=ca.cert, cert=client.cert, key=client.key)
    p = EtcdPublisher([etcd.endpoint], "/blockx/workers/", "10.0.0.9:8081", lambda: {"ready": True},
                      interval_ms=50, tls=tls)
    observer = etcd_client(*etcd.host_port, tls=tls, timeout=2)
    await p.start()
    try:
        value, lease = await eventually(lambda: read_value(observer, KEY), what="registration over TLS")
        assert value["workerAddr"] == "10.0.0.9:8081" and lease == p.lease_id
        # The key is visible to the observer a moment before the publisher's own put
        # returns and it records the registration.
        async def registered():
            return p.state == PublisherState.REGISTERED
        await eventually(registered, timeout=5, what="the publisher to record its registration")
        # A plaintext client, and a TLS client without a certificate, get nothing.
        for bad in (etcd_client(*etcd.host_port, timeout=1),
                    etcd_client(*etcd.host_port, tls=ClientTLS(ca=ca.cert), timeout=1)):
            with pytest.raises(aetcd.exceptions.ConnectionFailedError):
                await bad.get(KEY)
            await bad.close()
    finally:
        await p.deregister()
        await observer.close()
