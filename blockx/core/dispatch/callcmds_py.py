"""The three commands the DispatcherCore emits for every call (BindCall,
DispatchCallCmd, UnbindCall); pure-Python twin of callcmds.pyx.

Rules: what each command asks of the adapter is documented in
blockx/core/dispatch/commands.py, which re-exports these. They are plain
records: positional or keyword construction, equality by type and fields,
unhashable, a dataclass-style repr; both implementations behave the same."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BindCall", "UnbindCall", "DispatchCallCmd"]


@dataclass(slots=True)
class BindCall:
    call_id: str
    executor_id: str
    task_id: str
    is_subcall: bool
    parent_call_id: str


@dataclass(slots=True)
class UnbindCall:
    call_id: str
    executor_id: str


@dataclass(slots=True)
class DispatchCallCmd:
    call_id: str
    executor_id: str
    task_id: str
    function_id: str
    digest: str
    entry_selector: str
    args_json: bytes
    budget_ms: int          # 0 = unlimited
    attempt_seq: int
    parent_call_id: str     # "" for root calls
