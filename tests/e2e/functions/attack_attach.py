"""attack_attach(socket_path): from inside an executor, try to pose as an executor.

Connects to every Worker socket it can find (the path it is given, and the path
a sandboxed executor is given) and sends a first Heartbeat as a new executor id
and as the executor it runs in, without the attach secret; then tries to create
a file in each socket's directory. Reports what happened, never raises."""
import os
import socket
import struct

import orjson

from blockx.protocol import messages as m

SANDBOX_SOCKET = "/run/blockx/worker.sock"


def _frame(env):
    body = orjson.dumps(env)
    return struct.pack(">I", len(body)) + body


def _attach(path, executor_id):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(path)
    except OSError as exc:
        return f"connect: {type(exc).__name__}: {exc.strerror or exc}"
    try:
        s.sendall(_frame(m.heartbeat(executor_id, os.getpid(), 1, 0, 0, 4, 1 << 20, 0)))
        got = s.recv(65536)
        return "attached: the worker answered" if got else "refused: closed"
    except (ConnectionError, OSError) as exc:
        return f"refused: {type(exc).__name__}"
    finally:
        s.close()


def main(socket_path):
    out = {"attach": {}, "create": {}}
    own = ""
    import sys
    argv = sys.argv
    if "--executor-id" in argv:
        own = argv[argv.index("--executor-id") + 1]
    for path in dict.fromkeys([socket_path, SANDBOX_SOCKET]):
        if not os.path.exists(path):
            out["attach"][path] = "not visible"
            out["create"][path] = "not visible"
            continue
        out["attach"][path] = {eid: _attach(path, eid) for eid in ("exec-99", own or "exec-0")}
        target = os.path.join(os.path.dirname(path), "pwned-by-user-code")
        try:
            with open(target, "w") as f:
                f.write("x")
            out["create"][path] = "created"
        except OSError as exc:
            out["create"][path] = f"{type(exc).__name__}: {exc.strerror}"
    return out
