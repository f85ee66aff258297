"""One upsert transaction used once: every group written, then committed; any
failure (or a cancel) rolls it back, so nothing of it is visible. Both sources'
`upsert_rows` are this over their own transaction (DuckUpsert, PgUpsert), which
a streamed writer instead feeds batch by batch and commits itself."""
from __future__ import annotations

from typing import Any, Protocol


class UpsertTransaction(Protocol):
    async def write(self, groups: list[tuple[tuple[str, ...], list[list[Any]]]]) -> int: ...
    async def commit(self) -> None: ...
    async def rollback(self) -> None: ...


async def upsert_all(tx: UpsertTransaction, groups: list[tuple[tuple[str, ...], list[list[Any]]]]) -> int:
    """Write every group in `tx` and commit; roll back unless the commit went through
    (rollback is a no-op once committed). Returns the rows written."""
    try:
        written = await tx.write(groups)
        await tx.commit()
    finally:
        await tx.rollback()
    return written
