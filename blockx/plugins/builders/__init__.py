"""Call builders by name, and the registry a Profile selects from them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from blockx.plugins.builder_api import CallBuilder, is_streaming
from blockx.plugins.builders.call_list import CallListBuilder
from blockx.plugins.builders.payload import PayloadBuilder
from blockx.plugins.builders.range_scan import RangeScanBuilder
from blockx.plugins.builders.static import StaticBuilder

_FACTORIES: dict[str, Callable[[], Any]] = {
    "callList": CallListBuilder,
    "static": StaticBuilder,
    "payload": PayloadBuilder,
    "rangeScan": RangeScanBuilder,
}
KNOWN_BUILDERS = frozenset(_FACTORIES)


class BuilderRegistry:
    """The builders of one Worker. `get` returns None for a name that is not
    registered (the task then fails with BUILDER_NOT_FOUND)."""

    def __init__(self, builders: Iterable[CallBuilder] = ()):
        self._by_name: dict[str, CallBuilder] = {}
        for b in builders:
            self.register(b)

    @classmethod
    def from_names(cls, names: Iterable[str]) -> "BuilderRegistry":
        out = []
        for n in names:
            factory = _FACTORIES.get(n)
            if factory is None:
                raise ValueError(f"unknown call builder {n!r} (known: {', '.join(sorted(_FACTORIES))})")
            out.append(factory())
        return cls(out)

    def register(self, builder: CallBuilder) -> None:
        name = getattr(builder, "name", "")
        if not isinstance(name, str) or not name:
            raise ValueError(f"builder {builder!r} has no name")
        if name in self._by_name:
            raise ValueError(f"builder {name!r} is registered twice")
        self._by_name[name] = builder

    def get(self, name: str) -> CallBuilder | None:
        return self._by_name.get(name)

    def is_streaming(self, name: str) -> bool:
        b = self._by_name.get(name)
        return b is not None and is_streaming(b)

    def names(self) -> list[str]:
        return list(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self._by_name)
