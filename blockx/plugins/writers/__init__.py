"""The plugins a ResultHandler names (writers among them), and the registry a Profile selects from them."""

from __future__ import annotations

from blockx.plugins.registry import NamedRegistry
from blockx.plugins.writers.bundle_write import BundleWritePlugin
from blockx.plugins.writers.devtest import TestPlugin
from blockx.plugins.writers.log import LogPlugin
from blockx.plugins.writers.table_upserts import TableUpsertsPlugin

_FACTORIES = {
    "log": LogPlugin,
    "test": TestPlugin,
    "tableUpserts": TableUpsertsPlugin,
    "bundleWrite": BundleWritePlugin,
}
KNOWN_PLUGINS = frozenset(_FACTORIES)


class PluginRegistry(NamedRegistry):
    """The plugins of one Worker; `get` returns None for an unregistered name."""

    KIND = "writer plugin"
    FACTORIES = _FACTORIES
