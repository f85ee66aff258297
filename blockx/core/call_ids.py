"""Call ids and the task they belong to.

A root call of a one-shot call phase is ``f"{task_id}/{index}"``, a root of a
streaming batch ``f"{task_id}/{batch}.{row}"``, a subcall
``f"{parent_call_id}/sub-{n}"``. A task id may itself hold "/", so a call id's
task is never a guessed prefix (task "a/0" has the call "a/0/0", which also
starts with "a/"): it is read from the end, where the forms are exact. Strip
the trailing "sub-<n>" segments, then the root's own segment."""
from __future__ import annotations

_SUB = "sub-"


def task_id_of_call(call_id: str) -> str | None:
    """The id of the task ``call_id`` belongs to; None for a string that is no call id."""
    tid = call_id
    while True:
        i = tid.rfind("/")
        if i <= 0:
            return None
        last, tid = tid[i + 1:], tid[:i]
        if not last.startswith(_SUB):
            return tid


__all__ = ["task_id_of_call"]
