import pytest

from tests.support.binaries import missing
from tests.support.etcd import etcd_binary, etcd_fixture

# A fresh real etcd per test (about 0.25 s to start): outage tests stop and
# restart it, so sharing one would couple tests.
etcd_server = etcd_fixture()


@pytest.fixture(autouse=True)
def _etcd_installed():
    """Every test here runs a real etcd at some point (some only after an outage)."""
    if etcd_binary() is None:
        missing("etcd", "run `make etcd` (apt-get install etcd-server) or set ETCD_BIN")
