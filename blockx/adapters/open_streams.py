"""How many long-lived streams of one kind (TaskSession, WatchTasks) are open,
against the setting that bounds them. A stream past the bound is refused at
once with RESOURCE_EXHAUSTED and ``refusal()``, which names the setting."""
from __future__ import annotations


class OpenStreams:
    __slots__ = ("kind", "limit", "setting", "open")

    def __init__(self, kind: str, limit: int, setting: str) -> None:
        self.kind = kind
        self.limit = limit
        self.setting = setting
        self.open = 0

    def enter(self) -> bool:
        """Count one more stream; False (and nothing counted) when the bound is reached."""
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def leave(self) -> None:
        self.open -= 1

    def refusal(self) -> str:
        return (f"{self.open} {self.kind} streams are open on this worker, its limit ({self.setting}); "
                f"close one, share one {self.kind} stream for many tasks, or retry later")
