"""The executor round trip's own cost: one call over a Unix socket, doing no work.

`python -m bench.peers.uds_floor [--round-trips N]` forks a child shaped like an
executor (a blocking loop: poll, recv, decode the length-prefixed JSON frames,
answer each with one frame) and drives it from a uvloop Protocol shaped like the
Worker's side (decode what arrives, send the next frame): one frame in flight,
frames of the size of an ExecuteCall and its CallResult, so no read ever carries
two calls, as on the unary path, where each call reaches an idle executor alone.
It prints one JSON object: round trips/s and the CPU (user + system, from
os.times) each side spent per round trip. With bench/peers/grpc_floor.py this is
the floor under a one-call unary task: gRPC's own cost of the RPCs plus this."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import socket
import struct
import time

import orjson
import uvloop

_LEN = struct.Struct(">I")
CALL = orjson.dumps({
    "messageType": "ExecuteCall", "callId": "b-0123456789ab-42#1", "requestId": "",
    "payload": {"taskId": "b-0123456789ab-42", "functionId": "add1", "functionCodeDigest": "a" * 64,
                "entrySelector": "", "args": [42], "parentCallId": "", "callBudgetMs": 120000, "attemptSeq": 1}})


def _frames(buf: bytearray) -> list[bytes]:
    out = []
    while len(buf) >= 4:
        n = _LEN.unpack_from(buf)[0]
        if len(buf) < 4 + n:
            break
        out.append(bytes(buf[4:4 + n]))
        del buf[:4 + n]
    return out


def _executor_side(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    buf = bytearray()
    while True:
        poller.poll(1000)
        data = sock.recv(65536)
        if not data:
            return
        buf += data
        for body in _frames(buf):
            env = orjson.loads(body)
            out = orjson.dumps({"messageType": "CallResult", "callId": env["callId"], "requestId": "",
                                "payload": {"output": env["payload"]["args"][0] + 1, "budgetUsedMs": 0}})
            sock.sendall(_LEN.pack(len(out)) + out)


class _WorkerSide(asyncio.Protocol):
    def __init__(self, n: int, done: asyncio.Future) -> None:
        self.n, self.done, self.seen, self.buf = n, done, 0, bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        for body in _frames(self.buf):
            orjson.loads(body)
            self.seen += 1
            if self.seen == self.n:
                self.done.set_result(None)
                return
            self.send()

    def send(self) -> None:
        self.transport.write(_LEN.pack(len(CALL)) + CALL)


def _cpu(t: os.times_result, children: bool) -> float:
    return t.children_user + t.children_system if children else t.user + t.system


async def measure(n: int) -> dict:
    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:                                   # the executor's side: nothing of the loop is used
        try:
            a.close()
            _executor_side(b.detach())
        finally:
            os._exit(0)
    b.close()
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    transport, proto = await loop.connect_accepted_socket(lambda: _WorkerSide(n, done), a)
    c0, t0 = os.times(), time.perf_counter()
    proto.send()
    await done
    secs, c1 = time.perf_counter() - t0, os.times()
    transport.close()
    await asyncio.sleep(0.05)                      # the close reaches the child, which then exits
    await asyncio.to_thread(os.waitpid, pid, 0)
    c2 = os.times()
    loop_us = 1e6 * (_cpu(c1, False) - _cpu(c0, False)) / n
    exec_us = 1e6 * (_cpu(c2, True) - _cpu(c0, True)) / n
    return {"round_trips_per_s": round(n / secs, 1), "loop_side_cpu_us": round(loop_us, 1),
            "executor_side_cpu_us": round(exec_us, 1), "cpu_us_per_round_trip": round(loop_us + exec_us, 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.peers.uds_floor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--round-trips", type=int, default=20000, help="round trips (default 20000)")
    ns = p.parse_args(argv)
    if ns.round_trips < 1:
        p.error("--round-trips must be at least 1")
    print(json.dumps(uvloop.run(measure(ns.round_trips))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
