"""The call gate on a real grpc.aio server over loopback: a call without valid
credentials is refused before its request is deserialized (the deserializer never
runs), the identified caller reaches the handler of that call only, health is
never checked, and new work is refused past the memory budget before it is read."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from blockx.adapters.auth import Authenticator
from blockx.adapters.auth_tokens import TokenStore
from blockx.adapters.grpc.call_gate import UNSET, CallGate, gated_caller

TOKEN = "alice-token-0123456789abcdef"


def run(coro):
    return asyncio.run(coro)


async def _serve(tmp_path, over_budget=None):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {TOKEN}\n")
    counted: list[tuple[str, str]] = []
    seen = {"decoded": 0, "callers": []}

    def decode(raw: bytes) -> bytes:
        seen["decoded"] += 1
        return raw

    async def handler(request, context):
        seen["callers"].append(gated_caller())
        return b"ok"

    server = grpc.aio.server(interceptors=[CallGate(Authenticator("token", TokenStore(str(tokens))),
                                                    lambda m, c: counted.append((m, c)), over_budget)])
    methods = {name: grpc.unary_unary_rpc_method_handler(handler, request_deserializer=decode)
               for name in ("SubmitTask", "GetTaskResult")}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("blockx.worker.v1.WorkerService", methods),
                                     grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
                                         "Check": grpc.unary_unary_rpc_method_handler(handler,
                                                                                      request_deserializer=decode)})))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port, seen, counted


def test_a_call_without_credentials_is_refused_before_its_request_is_decoded(tmp_path):
    async def go():
        server, port, seen, counted = await _serve(tmp_path)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}",
                                                 options=[("grpc.max_send_message_length", -1)]) as ch:
                submit = ch.unary_unary("/blockx.worker.v1.WorkerService/SubmitTask")
                for md in (None, (("authorization", "Bearer wrong-token-0123456789"),),
                           (("authorization", "Basic x"),)):
                    with pytest.raises(grpc.aio.AioRpcError) as ei:
                        await submit(b"x" * (4 << 20), metadata=md, timeout=10)
                    assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert "requires a bearer token" in ei.value.details() or "Bearer <token>" in ei.value.details()
                assert seen["decoded"] == 0 and seen["callers"] == []
                assert counted == [("SubmitTask", "UNAUTHENTICATED")] * 3
                assert await submit(b"hi", metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=10) == b"ok"
                assert seen["decoded"] == 1 and [c.name for c in seen["callers"]] == ["alice"]
                # Health carries no credentials and is never refused.
                assert await ch.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=10) == b"ok"
        finally:
            await server.stop(0)
    run(go())
    assert gated_caller() is UNSET                 # outside a call: nothing


def test_past_the_budget_new_work_is_refused_unread_and_reads_pass(tmp_path):
    async def go():
        server, port, seen, counted = await _serve(tmp_path, over_budget=lambda: "over its memory budget (test)")
        md = (("authorization", f"Bearer {TOKEN}"),)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                with pytest.raises(grpc.aio.AioRpcError) as ei:
                    await ch.unary_unary("/blockx.worker.v1.WorkerService/SubmitTask")(b"x", metadata=md, timeout=10)
                assert (ei.value.code(), ei.value.details()) == (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                                 "over its memory budget (test)")
                assert seen["decoded"] == 0
                assert await ch.unary_unary("/blockx.worker.v1.WorkerService/GetTaskResult")(
                    b"x", metadata=md, timeout=10) == b"ok"
                assert counted == [("SubmitTask", "RESOURCE_EXHAUSTED")]
        finally:
            await server.stop(0)
    run(go())
