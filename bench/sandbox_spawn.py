"""What one sandboxed process costs to start, by runtime: `/bin/true`, and the
executor's interpreter with its imports, as a plain process, in bubblewrap,
with `runc run` (+ `runc delete`, as the oci runtime does) and, given a running
containerd's socket, with `ctr run --rm --rootfs` and the same read-only binds.
Rounds are interleaved (one of each runtime in turn), so a loaded machine
weighs on every runtime alike. Needs root (runc, containerd).

    .venv/bin/python bench/sandbox_spawn.py [--rounds 10] [--containerd /run/containerd/containerd.sock]
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from blockx.adapters.executor.oci import OciSandbox  # noqa: E402
from blockx.adapters.executor.sandbox import Sandbox, SandboxLimits  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--containerd", default="", help="a running containerd's socket: measure `ctr run` too")
    ns = p.parse_args(argv)
    d = tempfile.mkdtemp(prefix="blockx-spawn-")
    private = os.path.join(d, "w.exec-0.sock")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(private)
    limits = SandboxLimits(256, 32, 0)
    bwrap = Sandbox(limits)
    oci = OciSandbox(limits)
    env = {"PATH": "/usr/bin:/bin"}
    ctr = ["ctr", "--address", ns.containerd, "run", "--rm", "--env", "PATH=/usr/bin:/bin",
           "--memory-limit", str(limits.memory_mb << 20),
           "--mount", "type=bind,src=/usr,dst=/usr,options=rbind:ro"]
    for path in oci.readonly:
        ctr += ["--mount", f"type=bind,src={path},dst={path},options=rbind:ro"]
    programs = {"true": ["/bin/true"], "python": [sys.executable, "-c", "import blockx_executor.cli, blockx._fast"]}
    runtimes = ["process", "bwrap", "runc"] + (["containerd"] if ns.containerd else [])

    def command(runtime: str, program: list[str], n: int) -> list[str]:
        if runtime == "process":
            return program
        if runtime == "bwrap":
            argv = bwrap.argv("exec-0", program, socket_path=private)
            while argv[-2].startswith("--limit-"):                        # executor flags
                argv = argv[:-2]
            return argv
        if runtime == "runc":
            return oci.argv("exec-0", program, socket_path=private, env=env)
        return [*ctr, "--rootfs", str(oci.rootfs), f"blockx-spawn-{os.getpid()}-{n}", *program]

    times: dict[tuple[str, str], list[float]] = {}
    try:
        for n in range(ns.rounds):
            for name, program in programs.items():
                for runtime in runtimes:
                    argv = command(runtime, program, n)
                    t0 = time.perf_counter()
                    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True)
                    dt = (time.perf_counter() - t0) * 1000
                    if runtime == "bwrap":
                        bwrap.exit_reason("exec-0")
                    if runtime == "runc":
                        t1 = time.perf_counter()
                        oci.exit_reason("exec-0")
                        oci.remove("exec-0")                              # runc delete, waited for
                        dt += (time.perf_counter() - t1) * 1000
                    if r.returncode != 0:
                        print(f"{runtime} {name}: exit {r.returncode}: {r.stderr.decode()[-300:]}", file=sys.stderr)
                        return 1
                    times.setdefault((name, runtime), []).append(dt)
    finally:
        oci.close()
        bwrap.close()
        sock.close()
    print(f"{'program':8s} {'runtime':11s} {'median ms':>10s} {'min ms':>8s}  rounds")
    for name in programs:
        for runtime in runtimes:
            v = times[(name, runtime)]
            print(f"{name:8s} {runtime:11s} {statistics.median(v):10.1f} {min(v):8.1f}  {len(v)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
