"""Setting rules: the constraint on each configuration setting, stated once.

A `Rule` names a field, its type and its bounds. `check` applies rules to any
object that has the named fields: a core config (Config, AdmissionConfig,
DispatcherConfig) or the app's config section carrying the same settings, so the
app and the core validate a setting with the same rule instead of each keeping a
copy. Rules whose field an object lacks are skipped, which lets the app hand one
section the rule table of the core config that section feeds.

What differs between callers is only the vocabulary of the message: the core
names a field as the programmer wrote it (`taskSlots (task_slots)`) and puts the
value first ("must be > 0, got 0 (note)"); the app names it as the operator
writes it (`worker.taskSlots (TASK_SLOTS)`) and puts the value last ("must be
> 0 (note) (got 0)"). `Wording` holds that choice."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Rule:
    field: str
    lo: int | None = None            # inclusive lower bound
    hi: int | None = None            # inclusive upper bound
    note: str = ""                   # what a boundary value means ("0 = unlimited")
    kind: type = int                 # int, float or bool
    text: str = ""                   # the bound in words, where "> 0" would say less

    def type_ok(self, value: Any) -> bool:
        if self.kind is bool:
            return isinstance(value, bool)
        if isinstance(value, bool):
            return False
        if self.kind is float:
            return isinstance(value, (int, float))
        return isinstance(value, int)

    def holds(self, value: Any) -> bool:
        return (self.lo is None or value >= self.lo) and (self.hi is None or value <= self.hi)

    def bound(self) -> str:
        if self.text:
            return self.text
        if self.hi is not None:
            return f"between {self.lo} and {self.hi}"
        return "> 0" if self.lo == 1 and self.kind is int else f">= {self.lo}"


_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false"}


@dataclass(frozen=True, slots=True)
class Wording:
    name: Callable[[str], str]       # field -> how messages name it
    operator: bool = False           # the app's layout: the value last, in parentheses

    def out_of_bounds(self, rule: Rule, value: Any) -> str:
        note = f" ({rule.note})" if rule.note else ""
        if self.operator:
            return f"{self.name(rule.field)} must be {rule.bound()}{note} (got {value!r})"
        return f"{self.name(rule.field)} must be {rule.bound()}, got {value}{note}"

    def wrong_type(self, rule: Rule, value: Any) -> str:
        return f"{self.name(rule.field)} must be {_TYPE_WORDS[rule.kind]}, got {value!r}"


def check(obj: Any, rules: Iterable[Rule], wording: Wording, out: list[str]) -> bool:
    """Append a message for every rule `obj` breaks; True when every checked field
    has its type (rules that couple fields only compare well-typed values)."""
    typed = True
    for rule in rules:
        if not hasattr(obj, rule.field):
            continue
        value = getattr(obj, rule.field)
        if not rule.type_ok(value):
            out.append(wording.wrong_type(rule, value))
            typed = False
        elif not rule.holds(value):
            out.append(wording.out_of_bounds(rule, value))
    return typed
