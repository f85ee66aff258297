"""Harness for the orchestrator's adapter-layer integration tests.

The Orchestrator runs in-process on the test's event loop with the real
WorkerCore, DispatcherCore, builders, plugins, function code directory,
IO scope factory (devstub), Admission and Metrics. Only the executor adapter is
fake: `FakeAdapter` implements the API the orchestrator calls (bind, sends,
snapshots, ...), records every call in order, fails on demand, and injects
executor frames / attach / loss back through the orchestrator's handler
callbacks, exactly as `blockx.adapters.executor.adapter.ExecutorAdapter` does.

Clocks are fake (`FakeClock`): WorkerCore deadlines and the wedge backstop move
only when a test advances them and calls `orch.tick()`. Retry backoffs are real
loop timers (the orchestrator arms them with `loop.call_later`), so tests keep
backoffs in the tens of milliseconds.
"""
from __future__ import annotations

import asyncio
import hashlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson

from blockx._fast import load
from blockx.adapters.admission import Admission
from blockx.adapters.executor.errors import BindError, ExecutorGone
from blockx.adapters.executor.snapshot import ExecutorSnapshotData
from blockx.adapters.telemetry.metrics import Metrics
from blockx.adapters.orchestrator import Orchestrator
from blockx.app.config import load_config
from blockx.app.profile import DEV
from blockx.core.dispatch.dispatcher import DispatcherCore
from blockx.core.types import (
    CallRetryPolicy, FunctionCall, ResultHandler, SubmitTaskRequest, TaskSnapshot, TaskState,
)
from blockx.core.worker.core import WorkerCore
from blockx.plugins.builders import BuilderRegistry
from blockx.plugins.data.plane import DataPlane
from blockx.plugins.function_code.directory import FunctionCodeDirectory
from blockx.plugins.io.scope import IOScopeFactory
from blockx.plugins.writers import PluginRegistry
from blockx.protocol import messages as m

DEFAULT_FUNCTIONS = {
    "add": "def main(a, b):\n    return a + b\n",
    "echo": "def main(x):\n    return x\n",
    "parent": "from blockx_executor import sdk\n\ndef main(x):\n    return sdk.call('child', x)\n",
    "child": "def main(x):\n    return x * 10\n",
}

WALL0 = 1_700_000_000_000
MONO0 = 5_000_000


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class FakeClock:
    """Wall ms for WorkerCore, monotonic ms for DispatcherCore / wedge checks."""

    def __init__(self) -> None:
        self.wall_ms = WALL0
        self.mono_ms = MONO0

    def wall(self) -> int:
        return self.wall_ms

    def mono(self) -> int:
        return self.mono_ms

    def advance(self, ms: int) -> None:
        self.wall_ms += ms
        self.mono_ms += ms


@dataclass
class FakeExecutor:
    executor_id: str
    capacity: int = 4
    heartbeat_seq: int = 1
    runnable_count: int = 0
    memory_bytes: int = 0
    running_call_id: str = ""
    # None: the scheduler is live (a real one wakes every poll, so it reports "now");
    # a number: it last ran then (a test of the stall filter or the wedge check).
    last_scheduler_active_at_ms: int | None = None
    # call id -> "live" | "draining"
    reservations: dict[str, str] = field(default_factory=dict)


@dataclass
class Sent:
    """One ExecuteCall the orchestrator handed to the fake adapter."""
    executor_id: str
    call_id: str
    payload: dict          # decoded the way the executor would see it

    @property
    def attempt(self) -> int:
        return self.payload["attemptSeq"]

    @property
    def task_id(self) -> str:
        return self.payload["taskId"]


@dataclass
class Resume:
    executor_id: str
    call_id: str
    request_id: str
    payload: dict
    sidecar: bytes | None


@dataclass
class Cancel:
    executor_id: str
    call_id: str
    reason: str
    attempt_seq: int


_codec = load("codec")


def _wire(payload: dict) -> dict:
    # What the frame carries: orjson splices Fragments (call args) verbatim.
    return orjson.loads(orjson.dumps(payload))


class FakeAdapter:
    """A recording ExecutorAdapter with fault injection.

    Fault queues hold exceptions raised by the next calls of that operation, in
    order (None = let that call succeed). `on_bind` is called inside bind()
    (after the fault check), e.g. to post an event while commands execute."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.handler: Any = None
        self.executors: dict[str, FakeExecutor] = {}
        self.trace: list[tuple] = []
        self.executes: list[Sent] = []
        self.execute_times: list[float] = []   # loop.time() of every send attempt, trace order
        self.resumes: list[Resume] = []
        self.cancels: list[Cancel] = []
        self.killed: list[str] = []
        self.bind_faults: deque = deque()
        self.bind_subcall_faults: deque = deque()
        self.execute_faults: deque = deque()
        self.resume_faults: deque = deque()
        self.resume_gate: asyncio.Event | None = None
        self.resume_outbox_full = False        # post_resume_call refuses: the awaiting path runs
        self._unflushed: dict[str, list] = {}  # executor id -> resume waiters not yet told
        self.on_bind: Callable[[str, str], None] | None = None
        self.heartbeat_timeouts: list[str] = []
        self.kill_result = True
        # Like the real adapter, a handler callback that raises is recorded (and
        # logged there), never propagated into the connection.
        self.handler_errors: list[BaseException] = []

    # ---- the API the orchestrator calls ------------------------------------------

    def _conn(self, executor_id: str) -> FakeExecutor:
        ex = self.executors.get(executor_id)
        if ex is None:
            raise BindError(f"executor {executor_id!r} is not attached", executor_id=executor_id,
                            reason="executor_unknown")
        return ex

    def bind(self, call_id: str, executor_id: str) -> None:
        self.trace.append(("bind", call_id, executor_id))
        if self.bind_faults:
            exc = self.bind_faults.popleft()
            if exc is not None:
                raise exc
        ex = self._conn(executor_id)
        ex.reservations[call_id] = "live"
        if self.on_bind is not None:
            self.on_bind(call_id, executor_id)

    def bind_subcall(self, call_id: str, parent_call_id: str, executor_id: str) -> None:
        self.trace.append(("bind_subcall", call_id, parent_call_id, executor_id))
        if self.bind_subcall_faults:
            exc = self.bind_subcall_faults.popleft()
            if exc is not None:
                raise exc
        ex = self._conn(executor_id)
        if ex.reservations.get(parent_call_id) != "live":
            raise BindError(f"parent {parent_call_id} holds no live reservation",
                            call_id=call_id, executor_id=executor_id, reason="parent_not_bound")
        ex.reservations[call_id] = "live"

    def unbind(self, call_id: str, executor_id: str) -> None:
        self.trace.append(("unbind", call_id, executor_id))
        ex = self.executors.get(executor_id)
        if ex is not None and ex.reservations.get(call_id) == "live":
            del ex.reservations[call_id]

    def mark_draining(self, call_id: str, executor_id: str) -> None:
        self.trace.append(("mark_draining", call_id, executor_id))
        ex = self.executors.get(executor_id)
        if ex is not None and call_id in ex.reservations:
            ex.reservations[call_id] = "draining"

    def send_execute_call(self, executor_id: str, call_id: str, payload: dict) -> None:
        self.trace.append(("execute", call_id, executor_id, payload.get("attemptSeq")))
        self.execute_times.append(asyncio.get_running_loop().time())
        if self.execute_faults:
            exc = self.execute_faults.popleft()
            if exc is not None:
                raise exc
        self.executes.append(Sent(executor_id, call_id, _wire(payload)))

    def send_dispatched_call(self, cmd) -> None:
        # The real adapter's frame for the command, as the executor would read it.
        frame = _codec.encode_execute_call(cmd.call_id, cmd.task_id, cmd.function_id, cmd.digest,
                                           cmd.entry_selector, cmd.args_json, cmd.parent_call_id,
                                           cmd.budget_ms, cmd.attempt_seq)
        (envelope, _), = _codec.FrameDecoder().feed(frame)
        self.send_execute_call(cmd.executor_id, envelope["callId"], envelope["payload"])

    async def send_resume_call(self, executor_id: str, call_id: str, request_id: str,
                               payload: dict, sidecar: bytes | None = None) -> None:
        if self.resume_gate is not None:
            await self.resume_gate.wait()
        self._record_resume(executor_id, call_id, request_id, payload, sidecar)

    def _record_resume(self, executor_id: str, call_id: str, request_id: str, payload: dict,
                       sidecar: bytes | None) -> None:
        """Both resume forms: traced, an injected fault raised, a gone executor
        refused, else recorded as the executor would read it."""
        self.trace.append(("resume", call_id, executor_id, request_id))
        if self.resume_faults:
            exc = self.resume_faults.popleft()
            if exc is not None:
                raise exc
        if executor_id not in self.executors:
            raise ExecutorGone(executor_id)
        self.resumes.append(Resume(executor_id, call_id, request_id, _wire(payload), sidecar))

    def post_resume_call(self, executor_id: str, call_id: str, request_id: str, payload: dict,
                         sidecar: bytes | None, waiter) -> bool:
        """The callback form (ExecutorAdapter.post_resume_call): refused (False,
        nothing queued) while `resume_outbox_full` or `resume_gate` is set, so the
        awaiting send_resume_call runs; else recorded like it, and the waiter is
        told on the next loop iteration (the flush), or fails if the executor is
        lost before that."""
        if self.resume_outbox_full or self.resume_gate is not None:
            self.trace.append(("resume_refused", call_id, executor_id, request_id))
            return False
        self._record_resume(executor_id, call_id, request_id, payload, sidecar)
        self._unflushed.setdefault(executor_id, []).append(waiter)
        asyncio.get_running_loop().call_soon(self._flush_resumes, executor_id)
        return True

    def post_resume_result(self, executor_id: str, call_id: str, request_id: str, resume_kind: str,
                           result_json: bytes, budget_used_ms: int, waiter) -> bool:
        """ExecutorAdapter.post_resume_result: post_resume_call of the payload it stands for."""
        return self.post_resume_call(executor_id, call_id, request_id, {
            "resumeKind": resume_kind, "result": orjson.Fragment(result_json), "budgetUsedMs": budget_used_ms},
            None, waiter)

    def flush_now(self, executor_id: str) -> None:
        """ExecutorAdapter.flush_now: what is queued for the executor is written
        now (traced); the resume waiters of that executor are told at once."""
        self.trace.append(("flush", executor_id))
        self._flush_resumes(executor_id)

    def _flush_resumes(self, executor_id: str) -> None:
        for waiter in self._unflushed.pop(executor_id, []):
            if not waiter.done():
                waiter.set_result(None)

    async def send_cancel_call(self, executor_id: str, call_id: str, reason: str,
                               attempt_seq: int) -> None:
        self.trace.append(("cancel", call_id, executor_id, attempt_seq))
        if executor_id not in self.executors:
            raise ExecutorGone(executor_id)
        self.cancels.append(Cancel(executor_id, call_id, reason, attempt_seq))

    def snapshots(self) -> list[ExecutorSnapshotData]:
        out = []
        for eid in sorted(self.executors):
            ex = self.executors[eid]
            draining = sum(1 for v in ex.reservations.values() if v == "draining")
            out.append(ExecutorSnapshotData(
                executor_id=eid, healthy=True, runnable_count=ex.runnable_count,
                inflight_count=len(ex.reservations), usable_contexts=max(0, ex.capacity - draining),
                memory_bytes=ex.memory_bytes, heartbeat_seq=ex.heartbeat_seq,
                running_call_id=ex.running_call_id,
                last_scheduler_active_at_ms=(self.clock.mono() if ex.last_scheduler_active_at_ms is None
                                             else ex.last_scheduler_active_at_ms), pid=0,
                attached_at_ms=0, capacity=ex.capacity,
                free_contexts=max(0, ex.capacity - len(ex.reservations)),
                reserved_count=len(ex.reservations), draining_count=draining))
        return out

    def healthy_count(self) -> int:
        return len(self.executors)

    def check_heartbeat_timeouts(self, now_ms: int) -> list[str]:
        lost, self.heartbeat_timeouts = self.heartbeat_timeouts, []
        for eid in lost:
            self.lose(eid, "heartbeat timeout")
        return lost

    def kill_executor(self, executor_id: str) -> bool:
        self.trace.append(("kill", executor_id))
        self.killed.append(executor_id)
        return self.kill_result

    # ---- test side: executors come and go, frames come in -----------------------

    def attach(self, executor_id: str, capacity: int = 4, **fields: Any) -> FakeExecutor:
        ex = FakeExecutor(executor_id, capacity, **fields)
        self.executors[executor_id] = ex
        self._callback(self.handler.on_executor_attached, executor_id)
        return ex

    def lose(self, executor_id: str, reason: str = "connection closed") -> None:
        self.executors.pop(executor_id)
        for waiter in self._unflushed.pop(executor_id, []):   # as the outbox's close() does
            if not waiter.done():
                waiter.set_exception(ExecutorGone(executor_id, reason))
        self._callback(self.handler.on_executor_lost, executor_id, reason)

    def _callback(self, fn: Callable, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - mirrors ExecutorAdapter._handler_failed
            self.handler_errors.append(exc)

    def last_execute(self, call_id: str) -> Sent:
        for s in reversed(self.executes):
            if s.call_id == call_id:
                return s
        raise AssertionError(f"no ExecuteCall was sent for {call_id}")

    def execute_of(self, call_id: str) -> list[Sent]:
        return [s for s in self.executes if s.call_id == call_id]

    def _dispatched_attempt(self, call_id: str) -> int | None:
        for s in reversed(self.executes):
            if s.call_id == call_id:
                return s.attempt
        return None

    def deliver(self, executor_id: str, frames: list) -> None:
        """Hand one decoded chunk of frames to the orchestrator (one batch)."""
        items = []
        ex = self.executors.get(executor_id)
        for f in frames:
            env, sidecar = f if isinstance(f, tuple) else (f, None)
            # The real adapter releases a reservation on the terminal frame
            # before the orchestrator sees it (only for the attempt it dispatched).
            if (ex is not None and env["messageType"] in (m.CALL_COMPLETED, m.CALL_FAILED)
                    and self._dispatched_attempt(env["callId"]) == (env.get("payload") or {}).get("attemptSeq")):
                ex.reservations.pop(env["callId"], None)
            items.append((env, sidecar))
        self._callback(self.handler.on_executor_frames, executor_id, items)

    def completed(self, call_id: str, output: Any, *, budget_used_ms: int = 1,
                  attempt: int | None = None) -> dict:
        s = self.last_execute(call_id)
        return m.call_completed(call_id, s.task_id, s.attempt if attempt is None else attempt, output,
                                budget_used_ms)

    def failed(self, call_id: str, kind: str = m.USER_ERROR, retryable: bool = False,
               message: str = "boom", *, attempt: int | None = None) -> dict:
        s = self.last_execute(call_id)
        return m.call_failed(call_id, s.task_id, s.attempt if attempt is None else attempt, kind,
                             retryable, message)

    def complete(self, call_id: str, output: Any, **kw: Any) -> None:
        self.deliver(self.last_execute(call_id).executor_id, [self.completed(call_id, output, **kw)])

    def fail(self, call_id: str, kind: str = m.USER_ERROR, retryable: bool = False,
             message: str = "boom") -> None:
        self.deliver(self.last_execute(call_id).executor_id,
                     [self.failed(call_id, kind, retryable, message)])

    def wait_io(self, call_id: str, request_id: str, request: Any, backend: str = "devstub",
                sidecar: bytes | None = None) -> None:
        s = self.last_execute(call_id)
        env = m.call_waiting_io(call_id, request_id, s.task_id, s.attempt, backend, request)
        self.deliver(s.executor_id, [(env, sidecar)])

    def wait_subcall(self, call_id: str, request_id: str, function_id: str, args: list,
                     granted_budget_ms: int = 1000, ancestry: list | None = None) -> None:
        s = self.last_execute(call_id)
        env = m.call_waiting_subcall(call_id, request_id, s.task_id, s.attempt, function_id, args,
                                     granted_budget_ms, ancestry or [call_id])
        self.deliver(s.executor_id, [env])

    def wait_code(self, call_id: str, request_id: str, function_id: str, digest: str) -> None:
        s = self.last_execute(call_id)
        env = m.call_waiting_function_code(call_id, request_id, s.task_id, s.attempt, function_id,
                                           digest)
        self.deliver(s.executor_id, [env])

    def resumes_for(self, call_id: str) -> list[Resume]:
        return [r for r in self.resumes if r.call_id == call_id]

    def live_reservations(self) -> dict[str, list[str]]:
        return {eid: sorted(c for c, st in ex.reservations.items())
                for eid, ex in self.executors.items() if ex.reservations}


class Harness:
    def __init__(self, orch: Orchestrator, fake: FakeAdapter, clock: FakeClock, cfg: Any,
                 functions_dir: str, functions: dict[str, str]) -> None:
        self.orch = orch
        self.fake = fake
        self.clock = clock
        self.cfg = cfg
        self.functions_dir = functions_dir
        self.functions = functions
        self.core = orch.core
        self.disp = orch.disp
        self.metrics = orch.metrics
        self.data: Any = None          # the DataPlane (set by build)

    def digest(self, function_id: str) -> str:
        return sha256_hex(self.functions[function_id])

    def submit(self, task_id: str, calls: list[tuple[str, list]], *, policy: str = "FAST_FAIL",
               max_attempts: int = 3, backoff_ms: int = 10, timeout_ms: int = 0,
               result_handler: ResultHandler | None = None, slot_id: str = "",
               trace_context=None) -> TaskSnapshot:
        payload = orjson.dumps({"calls": [{"functionId": f, "args": a} for f, a in calls]})
        req = SubmitTaskRequest(task_id=task_id, slot_id=slot_id,
                                function_call=FunctionCall("callList", payload),
                                result_handler=result_handler, task_timeout_ms=timeout_ms,
                                call_failure_policy=policy,
                                call_retry_policy=CallRetryPolicy(max_attempts, backoff_ms, 0))
        return self.orch.submit_task(req, trace_context=trace_context)

    def state(self, task_id: str) -> TaskState:
        return self.orch.get_task_result(task_id).state

    async def terminal(self, task_id: str, timeout: float = 5.0) -> TaskSnapshot:
        await until(lambda: self.state(task_id).is_terminal, timeout, f"task {task_id} terminal")
        return self.orch.get_task_result(task_id)

    async def executed(self, n: int, timeout: float = 5.0) -> list[Sent]:
        """Wait until n ExecuteCalls in all were sent; return them."""
        await until(lambda: len(self.fake.executes) >= n, timeout, f"{n} ExecuteCall(s)")
        return self.fake.executes[:n]

    async def close(self) -> None:
        await self.orch.close()
        self.orch.close_watches()
        await settle()
        if self.data is not None:
            await self.data.aclose()


async def settle(rounds: int = 20) -> None:
    """Let spawned tasks (resume / cancel sends, phase runners) run."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def until(pred: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what or pred}")
        await asyncio.sleep(0.001)


def outputs(snap: TaskSnapshot) -> list:
    return [orjson.loads(o) for o in snap.result.outputs]


async def build(tmp_path, *, env: dict[str, str] | None = None,
                functions: dict[str, str] | None = None, tweak: Callable[[Any], None] | None = None,
                executors: tuple[str, ...] = ("exec-1",), capacity: int = 4, traces=None,
                spans=None) -> Harness:
    """An Orchestrator wired as blockx.app.run wires it, over a FakeAdapter
    (``traces``: a TraceStore that records its tasks, as TRACE_ENABLED does;
    ``spans``: a TaskSpans, as OTEL_EXPORTER_OTLP_ENDPOINT wires one)."""
    functions = dict(DEFAULT_FUNCTIONS if functions is None else functions)
    fdir = tmp_path / "functions"
    fdir.mkdir(exist_ok=True)
    for fid, src in functions.items():
        (fdir / f"{fid}.py").write_text(src)
    base_env = {"FUNCTIONS_DIR": str(fdir), "ETCD_ENDPOINTS": "none", "METRICS_LISTEN": "",
                "STATE_DIR": str(tmp_path / "state"),
                "CALL_RETRY_JITTER_PERCENT": "0", "EXECUTOR_COUNT": str(max(1, len(executors)))}
    cfg = load_config(DEV, env={**base_env, **(env or {})})
    if tweak is not None:
        tweak(cfg)
    cfg.validate(DEV)
    clock = FakeClock()
    dcfg = cfg.dispatcher_config()
    core = WorkerCore(cfg.core_config())
    disp = DispatcherCore(dcfg, lambda: 0.0)
    fcode = FunctionCodeDirectory(cfg.functions_dir, cfg.effective_function_snapshot_retention_ms(),
                                  now_ms=clock.wall())
    fake = FakeAdapter(clock)
    data = DataPlane.from_config(cfg)
    orch = Orchestrator(
        core=core, disp=disp, adapter=fake, fcode=fcode,
        builders=BuilderRegistry.from_names(DEV.builders, data=data),
        plugins=PluginRegistry.from_names(DEV.plugins, data=data), io_factory=IOScopeFactory.from_config(cfg, data),
        admission=Admission.from_config(cfg.admission_config()), stream_cfg=cfg.stream_build,
        metrics=Metrics(process_metrics=False), stall_timeout_ms=dcfg.effective_stall_timeout_ms,
        phase_io_timeout_ms=cfg.phase_io_timeout_ms, wall=clock.wall, mono=clock.mono, traces=traces,
        spans=spans)
    assert fake.handler is orch.executor_events
    for eid in executors:
        fake.attach(eid, capacity)
    h = Harness(orch, fake, clock, cfg, str(fdir), functions)
    h.data = data
    return h


class _PartSpy:
    """A dispatcher part with some methods replaced (the parts are compiled or
    slotted objects, whose methods cannot be set on the instance)."""

    def __init__(self, part: Any, overrides: dict) -> None:
        self._part = part
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._part, name)


def spy_dispatcher(disp: Any, wraps: dict) -> None:
    """Replace ``disp``'s parts' methods by ``wraps[(part, name)](orig)`` (e.g.
    ``("lifecycle", "handle_call_completed")``): the actor calls the parts through
    ``disp.<part>``, so it calls the wrappers."""
    by_part: dict = {}
    for (part, name), wrap in wraps.items():
        real = getattr(disp, part)
        real = real._part if isinstance(real, _PartSpy) else real
        by_part.setdefault(part, (real, {}))[1][name] = wrap(getattr(getattr(disp, part), name))
    for part, (real, overrides) in by_part.items():
        cur = getattr(disp, part)
        if isinstance(cur, _PartSpy):
            overrides = {**{k: v for k, v in cur.__dict__.items() if k != "_part"}, **overrides}
        setattr(disp, part, _PartSpy(real, overrides))
