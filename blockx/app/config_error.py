"""ConfigError: every configuration problem found, reported at once.

Loading, validation and the socket-directory check all raise it with the full
list, so a bad deployment is fixed in one round instead of one error per restart."""

from __future__ import annotations


class ConfigError(ValueError):
    """One or more configuration problems; `problems` lists each one."""

    def __init__(self, problems: list[str] | str, header: str = "invalid worker configuration"):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.header = header
        super().__init__(self.render())

    def render(self) -> str:
        if len(self.problems) == 1:
            return f"{self.header}: {self.problems[0]}"
        return f"{self.header} ({len(self.problems)} problems):\n" + "\n".join(
            f"  - {p}" for p in self.problems)
