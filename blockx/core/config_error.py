"""ConfigError: the one error type for configuration problems, reported at once.

It lives in the core so the cores' own config checks can raise it without
importing the app; the app's loader, validation and profile checks raise the same
type. Every raiser collects the full list first, so a bad deployment is fixed in
one round instead of one error per restart."""

from __future__ import annotations


class ConfigError(ValueError):
    """One or more configuration problems; `problems` lists each one."""

    def __init__(self, problems: list[str] | str, header: str = "invalid worker configuration"):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.header = header
        super().__init__(self.render())

    @property
    def violations(self) -> list[str]:
        """`problems` under the name the core's callers use for it."""
        return self.problems

    def render(self) -> str:
        if len(self.problems) == 1:
            return f"{self.header}: {self.problems[0]}"
        return f"{self.header} ({len(self.problems)} problems):\n" + "\n".join(
            f"  - {p}" for p in self.problems)
