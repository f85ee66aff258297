"""Command line of the executor process: parse flags, connect, attach, run.

Exit codes: 0 the Worker closed the connection (the normal way to stop an
executor); 1 start-up failed (bad socket path, Worker not listening, codec not
built); 2 the Worker sent a malformed frame or broke the message contract;
3 the connection failed otherwise (the Worker stopped reading); 70 an internal
error (logged with its traceback). argparse exits
2 on bad flags. SIGINT is ignored: a Ctrl-C in the Worker's terminal reaches
the whole process group, and the Worker, not the terminal, decides when its
executors stop (it closes their sockets when it has drained). SIGTERM stops the
process at once (an executor that is PID 1 of a container exits with 143)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

log = logging.getLogger("blockx_executor")

EXIT_CRASH = 70


def _exit_on_sigterm(signum, frame) -> None:
    os._exit(128 + signum)


def _positive(min_value: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < min_value:
            raise argparse.ArgumentTypeError(f"must be >= {min_value}, got {value}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m blockx_executor",
        description="BlockX Python Executor: connects to a Worker's Unix socket and runs "
                    "the function calls it sends, one greenlet per call.")
    p.add_argument("--executor-id", required=True, help="this executor's id, e.g. exec-0")
    p.add_argument("--socket-path", required=True, help="the Worker's Unix socket")
    p.add_argument("--executor-max-inflight", type=_positive(1), default=128, metavar="N",
                   help="root calls admitted at once; further ExecuteCalls queue (default 128)")
    p.add_argument("--executor-max-runnable", type=_positive(0), default=128, metavar="N",
                   help="the Worker's runnable threshold for this executor, reported for "
                        "reference; the Worker enforces it (default 128)")
    p.add_argument("--heartbeat-interval-ms", type=_positive(10), default=200, metavar="MS",
                   help="heartbeat period (default 200)")
    p.add_argument("--connect-timeout-ms", type=_positive(0), default=5000, metavar="MS",
                   help="keep retrying a socket that is missing or refuses for this long "
                        "(default 5000; 0 = try once)")
    p.add_argument("--budget-preempt-ms", type=_positive(0), default=0, metavar="MS",
                   help="interrupt a call that computes past its budget without yielding, "
                        "checking every MS ms (e.g. 50). Default 0: the "
                        "budget is checked when a call waits or finishes, and a call that "
                        "never yields is left to the Worker's wedge backstop")
    p.add_argument("--limit-memory-mb", type=_positive(0), default=0, metavar="MB",
                   help="address-space limit of this process (RLIMIT_AS); 0 = none")
    p.add_argument("--limit-processes", type=_positive(0), default=0, metavar="N",
                   help="process limit (RLIMIT_NPROC); 0 = none")
    p.add_argument("--limit-open-files", type=_positive(0), default=0, metavar="N",
                   help="open file limit (RLIMIT_NOFILE); 0 = none")
    p.add_argument("--code-cache-size", type=_positive(1), default=256, metavar="N",
                   help="function code versions (digests) kept compiled (default 256)")
    p.add_argument("--attach-secret-fd", type=_positive(3), default=0, metavar="FD",
                   help="an inherited file descriptor holding the one-time secret this executor "
                        "attaches with; read once at start and closed (the Worker's pool passes it)")
    p.add_argument("--run-as-user", default="", metavar="USER",
                   help="started as root: connect, then leave root for USER before attaching "
                        "(a private mount namespace, see blockx_executor.privileges)")
    p.add_argument("--log-level", default="info",
                   choices=["debug", "info", "warning", "error"], help="stderr log level")
    return p


def read_secret(fd: int) -> str:
    """The attach secret from the inherited descriptor `fd`, which is then closed."""
    import os

    chunks = []
    try:
        while True:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            chunks.append(chunk)
            if sum(map(len, chunks)) > 4096:
                break
    finally:
        os.close(fd)
    return b"".join(chunks).decode("ascii", "replace").strip()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    secret = ""
    if args.attach_secret_fd:
        try:
            secret = read_secret(args.attach_secret_fd)
        except OSError as exc:
            print(f"cannot read the attach secret from fd {args.attach_secret_fd}: {exc}", file=sys.stderr)
            return 1
    # The executor's stderr is the worker's: log the same JSON lines, tagged with the executor id.
    from blockx.app.logs import setup_logging

    setup_logging(args.log_level, static_fields={"service": "blockx-executor",
                                                 "executor_id": args.executor_id})
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if os.getpid() == 1:
        # PID 1 of a container's namespace: the kernel drops a signal it has no
        # handler for, so SIGTERM (forwarded by runc) would not stop it.
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if args.limit_memory_mb or args.limit_processes or args.limit_open_files:
        from .limits import apply
        apply(args.limit_memory_mb, args.limit_processes, args.limit_open_files)
    try:
        sys.stdout.reconfigure(line_buffering=True)  # user prints reach the log promptly
    except (AttributeError, ValueError):
        pass

    from blockx._fast import load

    from .heartbeat import Heartbeats
    from .scheduler import EXIT_OK, Scheduler
    from .transport import ConnectError, Connection, ConnectionClosed, connect

    try:
        codec = load("codec")
    except ImportError as exc:
        log.error("%s", exc)
        return 1
    try:
        sock = connect(args.socket_path, args.connect_timeout_ms)
    except ConnectError as exc:
        log.error("%s", exc)
        return 1
    if args.run_as_user:
        from .privileges import PrivilegeError, drop_to
        try:
            sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) != os.path.realpath(os.getcwd())]
            drop_to(args.run_as_user)
        except (PrivilegeError, OSError) as exc:
            log.error("cannot run as %r: %s", args.run_as_user, exc)
            sock.close()
            return 1
    conn = Connection(sock)
    scheduler = Scheduler(conn, codec, max_inflight=args.executor_max_inflight,
                          max_runnable=args.executor_max_runnable,
                          code_cache_size=args.code_cache_size,
                          idle_poll_ms=args.heartbeat_interval_ms)
    heartbeats = Heartbeats(conn, scheduler, args.executor_id, args.heartbeat_interval_ms,
                            codec.encode_frame, attach_secret=secret)
    del secret
    try:
        heartbeats.send_one()  # the first Heartbeat attaches this executor
    except ConnectionClosed as exc:
        log.info("worker closed the connection before attach: %s", exc)
        conn.close()
        return EXIT_OK if exc.clean else 3
    # DEBUG: the Worker logs the attach itself (with the pid and contexts), once it
    # accepted it; this line would reach its log a second time, as executor_output.
    log.debug("attached to %s (max inflight %d)", args.socket_path, args.executor_max_inflight)
    heartbeats.start()
    preemption = None
    if args.budget_preempt_ms:
        from .preempt import BudgetPreemption
        preemption = BudgetPreemption(scheduler, args.budget_preempt_ms)
        preemption.start()
    try:
        return scheduler.loop()
    except Exception:
        log.exception("executor crashed")
        return EXIT_CRASH
    finally:
        if preemption is not None:
            preemption.stop()
        heartbeats.stop()
        conn.close()
