from tests.support.etcd import etcd_fixture

# A fresh real etcd per test (about 0.25 s to start): outage tests stop and
# restart it, so sharing one would couple tests.
etcd_server = etcd_fixture()
