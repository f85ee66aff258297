"""Heartbeats from a thread of their own.

A call that never yields holds the main thread, but Python still hands the GIL
to this thread every switch interval, so heartbeats keep flowing while
`lastSchedulerActiveAtMs` (written by the scheduler each time it regains
control) stops moving and `runningCallId` names the culprit: exactly what the
Worker's wedge backstop looks for. The thread only reads the scheduler's plain
int / str fields and deque lengths, which is safe under the GIL.

Times are Unix epoch milliseconds (the Worker may compare `sentAtMs` with
`lastSchedulerActiveAtMs`, both from this process's clock)."""

from __future__ import annotations

import logging
import os
import resource
import sys
import threading
import time

from blockx.protocol import messages

from .transport import Connection, ConnectionClosed

log = logging.getLogger("blockx_executor")

EXIT_GRACE_S = 2.0

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def rss_bytes() -> int:
    """Resident set size now (falls back to the peak RSS without /proc)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Heartbeats:
    def __init__(self, conn: Connection, scheduler, executor_id: str, interval_ms: int,
                 encode_frame, features: tuple = (messages.FEATURE_EXECUTE_CALL_BATCH,),
                 attach_secret: str = ""):
        self.conn = conn
        # Sent once, in the first Heartbeat (the attach), then forgotten: the Worker
        # accepts a secret once, so a copy left in memory would be worth nothing anyway.
        self._attach_secret = attach_secret
        self.features = list(features)
        self.scheduler = scheduler
        self.executor_id = executor_id
        self.interval_s = interval_ms / 1000.0
        self.encode_frame = encode_frame
        self.pid = os.getpid()
        self.seq = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="blockx-heartbeat", daemon=True)

    def frame(self) -> bytes:
        s = self.scheduler
        self.seq += 1
        t = os.times()
        env = messages.heartbeat(
            self.executor_id, self.pid, self.seq,
            s.runnable_count(), s.inflight, s.available_contexts(), rss_bytes(),
            s.last_active_ms, s.running_call_id,
            int(t.user * 1000), int(t.system * 1000), now_ms())
        # Beyond the contract: the context capacity this executor was started with,
        # so the Worker need not estimate it from availableContexts + inflightCount.
        env["payload"]["maxInflight"] = s.max_inflight
        # Negotiated extensions this executor takes (messages.EXECUTE_CALL_BATCH).
        env["payload"]["features"] = self.features
        if self._attach_secret:
            env["payload"]["attachSecret"] = self._attach_secret
            self._attach_secret = ""
        return self.encode_frame(env)

    def send_one(self) -> None:
        self.conn.send_now(self.frame())

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.send_one()
            except ConnectionClosed as exc:
                log.debug("heartbeat thread stops: %s", exc)
                self._exit_if_main_is_stuck(exc)
                return
            except Exception:  # never let the thread die silently
                log.exception("heartbeat failed")
                return

    def _exit_if_main_is_stuck(self, exc: ConnectionClosed) -> None:
        """The Worker is gone. The main thread notices at its next pass, unless a
        call is computing without end (no budget to preempt it): then nobody is
        left to want its result, so end the process rather than linger."""
        if self._stop.wait(EXIT_GRACE_S):
            return
        log.warning("worker connection gone (%s) and call %r still running after %.0f s; "
                    "exiting", exc, self.scheduler.running_call_id, EXIT_GRACE_S)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(0 if exc.clean else 3)
