"""Writer plugins by name, and the registry a Profile selects from them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from blockx.plugins.writer_api import WriterPlugin
from blockx.plugins.writers.devtest import TestPlugin
from blockx.plugins.writers.log import LogPlugin

_FACTORIES: dict[str, Callable[[], Any]] = {
    "log": LogPlugin,
    "test": TestPlugin,
}
KNOWN_PLUGINS = frozenset(_FACTORIES)


class PluginRegistry:
    """The writer plugins of one Worker; `get` returns None for an unregistered name."""

    def __init__(self, plugins: Iterable[WriterPlugin] = ()):
        self._by_name: dict[str, WriterPlugin] = {}
        for p in plugins:
            self.register(p)

    @classmethod
    def from_names(cls, names: Iterable[str]) -> "PluginRegistry":
        out = []
        for n in names:
            factory = _FACTORIES.get(n)
            if factory is None:
                raise ValueError(f"unknown writer plugin {n!r} (known: {', '.join(sorted(_FACTORIES))})")
            out.append(factory())
        return cls(out)

    def register(self, plugin: WriterPlugin) -> None:
        name = getattr(plugin, "name", "")
        if not isinstance(name, str) or not name:
            raise ValueError(f"plugin {plugin!r} has no name")
        if name in self._by_name:
            raise ValueError(f"plugin {name!r} is registered twice")
        self._by_name[name] = plugin

    def get(self, name: str) -> WriterPlugin | None:
        return self._by_name.get(name)

    def names(self) -> list[str]:
        return list(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self._by_name)
