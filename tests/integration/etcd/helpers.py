"""Shared bits of the etcd integration tests: an observer client, polling, log capture."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aetcd
import orjson


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def events(self, name: str | None = None) -> list[logging.LogRecord]:
        return [r for r in self.records if name is None or getattr(r, "event", None) == name]


_counter = 0


def capture_logger() -> tuple[logging.Logger, ListHandler]:
    global _counter
    _counter += 1
    logger = logging.getLogger(f"test.etcd.{_counter}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    handler = ListHandler()
    logger.addHandler(handler)
    return logger, handler


async def eventually(cond: Callable[[], Awaitable[Any]], timeout: float = 10.0,
                     every: float = 0.02, what: str = "condition") -> Any:
    """Poll `cond` until it returns something truthy; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = await cond()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - etcd may be restarting
            last_exc = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_exc!r})")
        await asyncio.sleep(every)


async def read_value(client: aetcd.Client, key: bytes) -> tuple[dict, int] | None:
    """(decoded JSON, lease id) of `key`, or None when absent."""
    got = await client.get(key)
    if got is None:
        return None
    return orjson.loads(got.value), got.lease


class TcpProxy:
    """A real TCP relay to `target`; `cut()` is a network partition, `heal()` ends it.

    Lets a test keep etcd up while the publisher cannot reach it, which is the
    only way a lease really expires (a restarting etcd extends its leases).
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.frozen = False  # connections stay open but every byte is dropped

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> "TcpProxy":
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def cut(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()
        if server is not None:
            await server.wait_closed()

    async def heal(self) -> None:
        await self.start()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    if self.frozen:
                        continue
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers.difference_update((writer, up_writer))
