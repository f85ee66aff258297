"""A fake adapter around DispatcherCore for the dispatcher tests: it executes
the commands the way the real adapter must (BindCall -> bound/bind-failed fed
back at once, ArmCallRetry -> a timer on a virtual clock, SubcallDone -> a
resume of the parent) and records what a real executor would have received.

The virtual clock starts at 0 and only moves through ``advance``; timers fire
in (time, arming order), exactly at their deadline."""
from __future__ import annotations

from collections import deque

import orjson

from blockx.core.dispatch.dispatcher import DispatcherCore
from blockx.core.dispatch.commands import (
    ArmCallRetry, BatchSettled, BindCall, CancelCallCmd, CompleteCallFromCache, ConvergeTaskCalls,
    DispatchCallCmd, StopCallProduction, SubcallDone, UnbindCall)
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.types import PinnedCall, ExecutorSnapshot


def spec(fn: str, *args, digest: str = "d0") -> PinnedCall:
    return PinnedCall(fn, digest, orjson.dumps(list(args), option=orjson.OPT_SORT_KEYS))


class Harness:
    def __init__(self, config: DispatcherConfig | None = None, rand=lambda: 0.0,
                 executors=("e1",), contexts: int = 8) -> None:
        self.core = DispatcherCore(config or DispatcherConfig(), rand)
        self.now = 0
        self.log: list = []
        self.live: dict[str, DispatchCallCmd] = {}     # call_id -> current attempt on an executor
        self.bound: dict[str, str] = {}                # call_id -> executor holding a reservation
        self.timers: list[tuple[int, int, str]] = []
        self._timer_seq = 0
        self.converged: dict[str, ConvergeTaskCalls] = {}
        self.converge_count: dict[str, int] = {}
        self.subcall_done: list[SubcallDone] = []
        self.cancels: list[CancelCallCmd] = []
        self.settled: list[BatchSettled] = []
        self.stops: list[StopCallProduction] = []
        self.cache_hits: list[CompleteCallFromCache] = []
        self.fail_binds: set[str] = set()              # executor ids whose binds fail
        self.auto_resume = True
        self.snapshots: dict[str, ExecutorSnapshot] = {}
        for e in executors:
            self.snapshots[e] = ExecutorSnapshot(e, True, 0, contexts)
        if executors:
            self.sync()

    # --- executing commands ----------------------------------------------------------

    def run(self, cmds) -> list:
        q = deque(cmds)
        done = []
        while q:
            c = q.popleft()
            done.append(c)
            self.log.append(c)
            t = type(c)
            if t is BindCall:
                if c.executor_id in self.fail_binds:
                    q.extend(self.core.lifecycle.handle_bind_failed(c.call_id, self.now))
                else:
                    self.bound[c.call_id] = c.executor_id
                    q.extend(self.core.lifecycle.handle_executor_bound(c.call_id, self.now, c.executor_id))
            elif t is DispatchCallCmd:
                assert c.call_id not in self.live, f"second live attempt of {c.call_id}"
                self.live[c.call_id] = c
            elif t is UnbindCall:
                self.bound.pop(c.call_id, None)
            elif t is CancelCallCmd:
                self.cancels.append(c)
                self.live.pop(c.call_id, None)
                self.bound.pop(c.call_id, None)
            elif t is ArmCallRetry:
                assert c.fire_at_ms >= self.now
                self._timer_seq += 1
                self.timers.append((c.fire_at_ms, self._timer_seq, c.call_id))
                self.timers.sort()
            elif t is ConvergeTaskCalls:
                self.converged[c.task_id] = c
                self.converge_count[c.task_id] = self.converge_count.get(c.task_id, 0) + 1
            elif t is SubcallDone:
                self.subcall_done.append(c)
                if self.auto_resume:
                    q.extend(self.core.lifecycle.handle_call_resumed(c.parent_call_id, self.now))
            elif t is BatchSettled:
                self.settled.append(c)
            elif t is StopCallProduction:
                self.stops.append(c)
            elif t is CompleteCallFromCache:
                self.cache_hits.append(c)
            else:  # pragma: no cover - a new command type needs a branch here
                raise AssertionError(f"unknown command {c!r}")
        return done

    def epilogue(self) -> list:
        return self.run(self.core.lifecycle.epilogue(self.now))

    def feed(self, cmds) -> list:
        """Execute an event's commands, then the epilogue."""
        return self.run(cmds) + self.epilogue()

    # --- events ------------------------------------------------------------------------

    def sync(self) -> list:
        return self.feed(self.core.lifecycle.handle_executor_snapshot_updated(
            list(self.snapshots.values()), self.now))

    def set_executor(self, eid: str, **fields) -> list:
        snap = self.snapshots.get(eid) or ExecutorSnapshot(eid, True, 0, 8)
        for k, v in fields.items():
            setattr(snap, k, v)
        self.snapshots[eid] = snap
        return self.sync()

    def submit(self, task_id: str, calls, policy="FAST_FAIL", retry=None, instance_id="") -> list:
        p = self.core.intake.prepare_call_phase(task_id, calls, policy, retry, instance_id)
        return self.feed(self.core.intake.commit_call_phase(p, self.now))

    def attempt(self, call_id: str) -> int:
        return self.live[call_id].attempt_seq

    def complete(self, call_id: str, output: bytes | None = None, budget_used_ms: int = 0) -> list:
        cmd = self.live.pop(call_id)
        out = output if output is not None else b'{"r":' + cmd.args_json + b"}"
        return self.feed(self.core.lifecycle.handle_call_completed(call_id, cmd.attempt_seq, out,
                                                         budget_used_ms, self.now))

    def fail(self, call_id: str, kind: str = "USER_ERROR", retryable: bool = False,
             message: str = "boom", budget_used_ms: int = 0) -> list:
        cmd = self.live.pop(call_id)
        return self.feed(self.core.lifecycle.handle_call_failed(call_id, cmd.attempt_seq, kind, retryable,
                                                      message, self.now, budget_used_ms))

    def lose(self, eid: str) -> list:
        for cid in [c for c, cmd in self.live.items() if cmd.executor_id == eid]:
            del self.live[cid]
        self.snapshots.pop(eid, None)
        cmds = self.core.lifecycle.handle_executor_lost(eid, self.now)
        return self.feed(cmds)

    def advance(self, ms: int) -> list:
        """Move the clock; fire every timer due at or before the new time."""
        target = self.now + ms
        done = []
        while self.timers and self.timers[0][0] <= target:
            at, _, cid = self.timers.pop(0)
            self.now = at
            done += self.feed(self.core.lifecycle.handle_retry_ready(cid, self.now))
        self.now = target
        return done + self.epilogue()

    def subcall(self, parent: str, fn: str, *args, budget: int = 100, request_id: str = "r",
                executor: str | None = None):
        eid = executor if executor is not None else self.live[parent].executor_id
        res, cmds = self.core.lifecycle.add_subcall(parent, eid, request_id, fn, "d0",
                                          orjson.dumps(list(args)), budget, self.now)
        return res, self.feed(cmds)

    def live_of(self, task_id: str) -> list[str]:
        return [c for c, cmd in self.live.items() if cmd.task_id == task_id]


def of_type(cmds, t) -> list:
    return [c for c in cmds if type(c) is t]
