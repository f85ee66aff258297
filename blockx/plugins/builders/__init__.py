"""Call builders by name, and the registry a Profile selects from them."""

from __future__ import annotations

from blockx.plugins.builder_api import is_streaming
from blockx.plugins.builders.bundle_scan import BundleScanBuilder
from blockx.plugins.builders.call_list import CallListBuilder
from blockx.plugins.builders.db_scan import DbScanBuilder
from blockx.plugins.builders.payload import PayloadBuilder
from blockx.plugins.builders.range_scan import RangeScanBuilder
from blockx.plugins.builders.static import StaticBuilder
from blockx.plugins.registry import NamedRegistry

_FACTORIES = {
    "callList": CallListBuilder,
    "static": StaticBuilder,
    "payload": PayloadBuilder,
    "rangeScan": RangeScanBuilder,
    "dbscan": DbScanBuilder,
    "bundleScan": BundleScanBuilder,
}
KNOWN_BUILDERS = frozenset(_FACTORIES)


class BuilderRegistry(NamedRegistry):
    """The builders of one Worker. `get` returns None for a name that is not
    registered (the task then fails with BUILDER_NOT_FOUND)."""

    KIND = "call builder"
    FACTORIES = _FACTORIES

    def is_streaming(self, name: str) -> bool:
        b = self._by_name.get(name)
        return b is not None and is_streaming(b)
