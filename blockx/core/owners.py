"""Task ownership: which caller may see a task id, and which may reuse it.

Rules:
- A task id belongs to the identity that first reserved or submitted it: the
  ``owner`` of its TaskIndexEntry, kept with the entry (reservation, running
  task, retained result, tombstone) until the entry is purged.
- ``caller`` None is the unrestricted caller (a Worker whose API has no
  authentication, or in-process use): it sees every task, and what it creates
  has owner "".
- An admin caller sees and may resubmit every task; what it creates is its own.
- Any other caller sees only its own tasks. Reading another's task (result,
  watch, trace) is NotFound with the message of an unknown id, so the answer
  does not tell that the id exists; reserving or submitting another's id is
  AlreadyExists, never that task's snapshot or outputs.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Caller:
    """Who makes a request: an authenticated identity's name, and whether it is admin."""
    name: str
    admin: bool = False


def owner_of(caller: Caller | None) -> str:
    """The owner recorded for a task that ``caller`` creates."""
    return "" if caller is None else caller.name


def may_use(owner: str, caller: Caller | None) -> bool:
    """True when ``caller`` may see (and resubmit) a task owned by ``owner``."""
    return caller is None or caller.admin or caller.name == owner


__all__ = ["Caller", "may_use", "owner_of"]
