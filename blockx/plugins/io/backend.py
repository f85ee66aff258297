"""The IO backend contract. A backend serves one kind of external system for every
task; per-task caching and admission live in TaskIOScope, not here.

A backend may also offer `request_now(request_json, body)`: the same answer
when it needs no await, or None when it must await `request` (TaskIOScope
then serves the wait without a Task).

`request(request_json, body)` takes the call's raw JSON request bytes and an
optional binary body (it travels in the BXB1 sidecar) and returns the JSON result
bytes plus an optional binary body. Failures are IOBackendError with `retryable`
set by the backend (a timeout may be, a malformed request never is)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class IOBackend(Protocol):
    name: str

    async def request(self, request_json: bytes, body: bytes | None) -> tuple[bytes, bytes | None]:
        ...

    async def close(self) -> None:
        ...
