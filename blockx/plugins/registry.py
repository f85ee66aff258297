"""A registry of named plugins (call builders, the plugins a ResultHandler names) for one Worker.

A Profile lists names; `from_names` instantiates each from the kind's factory
table, so a name the profile does not list is simply absent (`get` returns None
and the task fails with BUILDER_NOT_FOUND / PLUGIN_FAILED)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar


class NamedRegistry:
    KIND: ClassVar[str] = "plugin"                          # for messages: "call builder", "writer plugin"
    FACTORIES: ClassVar[Mapping[str, Callable[..., Any]]] = {}

    def __init__(self, items: Iterable[Any] = ()):
        self._by_name: dict[str, Any] = {}
        for item in items:
            self.register(item)

    @classmethod
    def from_names(cls, names: Iterable[str], data: Any = None):
        """Instantiate each named plugin; those that read or write data sources
        (NEEDS_DATA) get the Worker's DataPlane."""
        out = []
        for n in names:
            factory = cls.FACTORIES.get(n)
            if factory is None:
                raise ValueError(f"unknown {cls.KIND} {n!r} (known: {', '.join(sorted(cls.FACTORIES))})")
            if getattr(factory, "NEEDS_DATA", False):
                if data is None:
                    raise ValueError(f"{cls.KIND} {n!r} needs the Worker's data plane")
                out.append(factory(data))
            else:
                out.append(factory())
        return cls(out)

    def register(self, item: Any) -> None:
        name = getattr(item, "name", "")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.KIND} {item!r} has no name")
        if name in self._by_name:
            raise ValueError(f"{self.KIND} {name!r} is registered twice")
        self._by_name[name] = item

    def get(self, name: str) -> Any | None:
        return self._by_name.get(name)

    def names(self) -> list[str]:
        return list(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self._by_name)
