"""activateAndRun: activation -> Builder -> Calls -> Plugin for each accepted
task, each phase under its admission gate, inline while no phase has to wait.

The runner only executes what WorkerCore decides: it reports each phase's outcome
with handle_task_phase_finished and runs whichever phase command comes back. When
the core converges the task for another reason (deadline, Watch grace), the
terminal path cancels this runner; a late outcome is dropped by the core as out
of order, so there is no race to lose."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Iterator

from blockx._fast import load
from blockx.core import failure_codes as fc
from blockx.core.dispatch.commands import ConvergeTaskCalls
from blockx.core.types import (
    ConvergeTask, PhaseOutcome, PluginResult, StartBuilderPhase, StartCallPhase, StartWriterPhase,
    TaskPhase,
)
from blockx.plugins.builder_api import (MAX_EAGER_CALLS, BuildContext, BuilderError, is_async_streaming,
                                        is_streaming)
from blockx.plugins.writer_api import PluginContext

PackedCalls = load("calllist").PackedCalls   # the callList builder's packed call list
log = logging.getLogger("blockx.phases")


class TaskPhases:
    """The per-task phases.

    The driver runs a task's phases inline while none of them has to wait: a
    synchronous builder whose gate has room, a Calls phase (started inline, its
    end arrives as a callback from the dispatch actor), no plugin. The first
    phase that must wait (a full gate, a plugin to await) hands the rest to one
    asyncio Task (``_run_phases``), which awaits each phase as before."""

    def __init__(self, *, core, disp, actor, runtimes, fcode, builders, plugins, io_factory, admission,
                 stream_cfg, metrics, phase_io_timeout_ms: int, wall: Callable[[], int],
                 on_converge: Callable[[ConvergeTask], None], traces=None) -> None:
        self.core = core
        self.disp = disp
        self.actor = actor
        self._runtimes = runtimes                 # the Orchestrator's; read here, never changed
        self.fcode = fcode
        self.builders = builders
        self.plugins = plugins
        self.io_factory = io_factory
        self.admission = admission
        self.stream_cfg = stream_cfg
        self.metrics = metrics
        self.phase_io_timeout_ms = phase_io_timeout_ms
        self._wall = wall
        self._on_converge = on_converge
        self._loop = asyncio.get_running_loop()
        self.traces = traces                      # TraceStore (trace_recorder.py); None when tracing is off

    def drive(self, rt, cmd) -> None:
        """Activation (pin the code epoch, open the IO scope), then the phases."""
        core = self.core
        tid = rt.task_id
        if rt.ended:
            return
        now = self._wall()
        try:
            epoch = self.fcode.current_epoch(now)
            rt.view = self.fcode.pin(epoch, now)
        except Exception as exc:  # noqa: BLE001
            self._apply_core(core.handle_task_activation_failed(
                tid, fc.ACTIVATION_FAILED, f"pinning the function code epoch failed: {exc}", self._wall()))
            return
        try:
            rt.io_scope = self.io_factory.new_task_scope(tid)
        except Exception as exc:  # noqa: BLE001
            self._apply_core(core.handle_task_activation_failed(
                tid, fc.IO_SCOPE_FAILED, f"opening the task's IO scope failed: {exc}", self._wall()))
            return
        self._advance(rt, lambda: self._apply_core(
            core.handle_task_activation_prepared(tid, cmd.slot_id, epoch, self._wall())))

    def _advance(self, rt, step) -> None:
        """Run ``step()`` (it returns the next phase command), then every phase that
        can run inline; stop at the Calls phase (its end calls back) or hand over
        to a Task at the first phase that must wait."""
        core = self.core
        tid = rt.task_id
        try:
            nxt = step()
            while nxt is not None and not rt.ended:
                t = type(nxt)
                if t is StartBuilderPhase:
                    builder = self.builders.get(nxt.function_call.type)
                    if builder is not None and is_async_streaming(builder):
                        break                        # it awaits a database: run it in a Task
                    if builder is not None and not self.admission.builder.try_enter():
                        break
                    outcome = self._builder_outcome(rt, nxt, builder, gated=builder is not None)
                    phase = TaskPhase.BUILDER
                elif t is StartCallPhase:
                    if not self.admission.executor.try_enter():
                        break
                    rt.gate = self.admission.executor
                    rt.on_calls_done = self._calls_done_inline
                    failed = self._start_calls(rt, nxt)
                    if failed is None:
                        return                       # _calls_done_inline continues
                    self.leave_calls(rt)
                    outcome = failed
                    phase = TaskPhase.CALLS
                elif t is StartWriterPhase and nxt.result_handler is None:
                    outcome = PhaseOutcome(ok=True)
                    phase = TaskPhase.PLUGIN
                else:
                    break
                nxt = self._apply_core(core.handle_task_phase_finished(tid, phase, outcome, self._wall()))
        except Exception:  # noqa: BLE001 - a bug here must still converge the task
            log.exception("task %s phase driver crashed", tid)
            self._converge_after_crash(rt)
            return
        if nxt is not None and not rt.ended:
            rt.runner = self._loop.create_task(self._run_phases(rt, nxt))

    def _calls_done_inline(self, rt, conv) -> None:
        """The dispatch actor's ConvergeTaskCalls for a Calls phase started inline.
        The task moves on in a callback after the actor's batch (as a resumed Task
        would), so the actor's batch and its epilogue stay the actor's alone."""
        self.leave_calls(rt)
        outcome = _calls_outcome(conv)
        self._loop.call_soon(self._advance, rt, lambda: self._apply_core(self.core.handle_task_phase_finished(
            rt.task_id, TaskPhase.CALLS, outcome, self._wall())))

    def leave_calls(self, rt) -> None:
        """The running Calls phase of ``rt`` ends: its gate is released."""
        if rt.gate is not None:
            rt.gate.release()
            rt.gate = None
        rt.on_calls_done = None
        self.metrics.observe_phase("calls", time.perf_counter() - rt.calls_started)

    async def _run_phases(self, rt, nxt) -> None:
        """The phases from ``nxt`` on, awaiting each (the path of a task that waits)."""
        core = self.core
        tid = rt.task_id
        try:
            while nxt is not None:
                t = type(nxt)
                if t is StartBuilderPhase:
                    builder = self.builders.get(nxt.function_call.type)
                    if builder is None:
                        outcome = self._builder_outcome(rt, nxt, None, gated=False)
                    elif is_async_streaming(builder):
                        async with self.admission.builder:
                            outcome = await self._async_builder_outcome(rt, nxt, builder)
                    else:
                        async with self.admission.builder:
                            outcome = self._builder_outcome(rt, nxt, builder, gated=False)
                    phase = TaskPhase.BUILDER
                elif t is StartCallPhase:
                    outcome = await self._calls_phase(rt, nxt)
                    phase = TaskPhase.CALLS
                elif t is StartWriterPhase:
                    outcome = await self._writer_phase(rt, nxt)
                    phase = TaskPhase.PLUGIN
                else:  # pragma: no cover
                    log.error("task %s: unexpected phase command %r", tid, nxt)
                    return
                nxt = self._apply_core(core.handle_task_phase_finished(tid, phase, outcome, self._wall()))
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001 - a bug here must still converge the task
            log.exception("task %s runner crashed", tid)
            self._converge_after_crash(rt)

    def _converge_after_crash(self, rt) -> None:
        if rt.ended:
            return
        tid = rt.task_id
        ctx = self.core.get_task_context(tid)
        phase = ctx.phase if ctx is not None else None
        if phase in (TaskPhase.BUILDER, TaskPhase.CALLS, TaskPhase.PLUGIN):
            self._apply_core(self.core.handle_task_phase_finished(
                tid, phase, PhaseOutcome.failure("", "internal error in the worker; see its log"), self._wall()))

    def _apply_core(self, res) -> Any:
        """Execute a core result's commands; return the next phase command, if any."""
        nxt = None
        for cmd in res.commands:
            if type(cmd) is ConvergeTask:
                self._on_converge(cmd)
            else:
                nxt = cmd
                if self.traces is not None: self.traces.phase_started(cmd)  # trace hook
        return nxt

    # ---- Builder -----------------------------------------------------------------

    def _builder_outcome(self, rt, cmd: StartBuilderPhase, builder, *, gated: bool) -> PhaseOutcome:
        """Run a (synchronous) builder; ``gated``: the caller entered the builder gate
        inline and this releases it."""
        if builder is None:
            known = ", ".join(sorted(self.builders.names())) or "none"
            return PhaseOutcome.failure(fc.BUILDER_NOT_FOUND,
                                        f"no call builder named {cmd.function_call.type!r} "
                                        f"(this worker's profile registers: {known})")
        ctx = BuildContext(task_id=rt.task_id, instance_id=rt.instance_id, deadline_ms=rt.deadline_ms)
        t0 = time.perf_counter()
        try:
            if self.stream_cfg.enabled and is_streaming(builder):
                rt.stream = builder.prepare_stream(cmd.function_call.payload, ctx)
                return PhaseOutcome(ok=True, streaming=True)
            calls = builder.build(cmd.function_call.payload, ctx)
        except Exception as exc:  # noqa: BLE001 - BuilderError or a builder bug
            return PhaseOutcome.failure(fc.BUILDER_FAILED, f"{cmd.function_call.type}: {exc}",
                                        bool(getattr(exc, "retryable", False)))
        finally:
            if gated:
                self.admission.builder.release()
            self.metrics.observe_phase("builder", time.perf_counter() - t0)
        return PhaseOutcome(ok=True, calls=calls)

    async def _async_builder_outcome(self, rt, cmd: StartBuilderPhase, builder) -> PhaseOutcome:
        """An async streaming builder (a database scan): open the stream here, so a
        bad query fails the Builder phase. Without streamBuild the whole stream is
        drained into the call list, up to MAX_EAGER_CALLS."""
        ctx = BuildContext(task_id=rt.task_id, instance_id=rt.instance_id, deadline_ms=rt.deadline_ms)
        t0 = time.perf_counter()
        stream = None
        try:
            stream = await builder.open_stream(cmd.function_call.payload, ctx)
            if rt.ended:
                return PhaseOutcome.failure(fc.BUILDER_FAILED, "the task ended while its stream opened")
            if self.stream_cfg.enabled:
                rt.stream, stream = stream, None
                return PhaseOutcome(ok=True, streaming=True)
            calls: list = []
            sc = self.stream_cfg
            async for batch in stream.abatches(sc.batch_max_rows, sc.batch_max_args_bytes):
                calls.extend(batch)
                if len(calls) > MAX_EAGER_CALLS:
                    raise BuilderError(f"more than {MAX_EAGER_CALLS} calls built at once; enable streaming "
                                       "build (STREAM_BUILD_ENABLED=true) or narrow the scan")
        except Exception as exc:  # noqa: BLE001 - BuilderError or a builder bug
            return PhaseOutcome.failure(fc.BUILDER_FAILED, f"{cmd.function_call.type}: {exc}",
                                        bool(getattr(exc, "retryable", False)))
        finally:
            if stream is not None:
                await stream.aclose()
            self.metrics.observe_phase("builder", time.perf_counter() - t0)
        return PhaseOutcome(ok=True, calls=calls)

    # ---- Calls -------------------------------------------------------------------

    def _resolve(self, rt, specs) -> Iterator[tuple]:
        """The dispatcher's (function_id, digest, args_json, entry_selector) of each
        spec, as a generator the dispatcher packs into its compact queued form, so
        no per-call tuple list is built. Every distinct function id is resolved
        here first, in list order (a FunctionNotFound names the first unknown one)."""
        view = rt.view
        table: dict[str, tuple[str, str]] = {}
        for s in specs:
            fid = s.function_id
            if fid not in table:
                table[fid] = view.resolve(fid)
        return _with_digests(table, specs)

    def _start_calls(self, rt, cmd: StartCallPhase) -> PhaseOutcome | None:
        """Hand the phase's calls (or the stream) to the dispatcher; a failure
        outcome if they cannot even be resolved. Its end: ``_on_calls_converged``."""
        rt.calls_started = time.perf_counter()
        rp = cmd.call_retry_policy
        retry = (rp.max_attempts, rp.base_backoff_ms, rp.jitter_percent)
        if cmd.streaming:
            self.actor.post(lambda n: self.disp.commit_call_stream(
                rt.task_id, cmd.call_failure_policy, retry, cmd.instance_id, n))
            rt.credits = asyncio.Semaphore(self.stream_cfg.max_outstanding_batches)
            rt.producer = self.actor.spawn(self._produce(rt))
            return None
        specs = cmd.calls or []
        packed = type(specs) is PackedCalls
        try:
            if packed:      # callList: the builder's arrays become the queue as they are
                view = rt.view
                fns = [(fid, *view.resolve(fid)) for fid in specs.fids]
            else:
                calls = self._resolve(rt, specs)
        except Exception as exc:  # noqa: BLE001 - FunctionNotFound
            return PhaseOutcome.failure(fc.CALL_FAILED, str(exc))
        if packed:
            prepared = self.disp.prepare_packed_call_phase(
                rt.task_id, fns, specs.fidx, specs.args, specs.offs, cmd.call_failure_policy, retry,
                cmd.instance_id)
        else:
            prepared = self.disp.prepare_call_phase(rt.task_id, calls, cmd.call_failure_policy, retry,
                                                    cmd.instance_id)
        # The dispatcher holds the calls in its compact form now. The builder's list
        # is also referenced by the core's record of the task (its builder outcome
        # and this StartCallPhase) for the task's whole life: empty it, so a queued
        # call is not kept twice (the core never reads it again).
        if type(specs) is list or packed:
            specs.clear()
        if self.traces is not None: self.traces.calls_queued(rt.task_id, len(prepared))  # trace hook
        self.actor.post(lambda n: self.disp.commit_call_phase(prepared, n))
        return None

    async def _calls_phase(self, rt, cmd: StartCallPhase) -> PhaseOutcome:
        await self.admission.executor.enter()
        rt.gate = self.admission.executor
        done = rt.calls_done = self._loop.create_future()
        rt.on_calls_done = lambda rt_, conv: done.done() or done.set_result(conv)
        try:
            failed = self._start_calls(rt, cmd)
            if failed is not None:
                return failed
            conv = await done
        finally:
            if rt.gate is not None:
                self.leave_calls(rt)
        return _calls_outcome(conv)

    def calls_converged(self, cmd) -> None:
        """The dispatch actor's ConvergeTaskCalls: the task's Calls phase is over."""
        rt = self._runtimes.get(cmd.task_id)
        if rt is not None and rt.on_calls_done is not None:
            rt.on_calls_done(rt, cmd)

    @staticmethod
    def _fail_calls(rt, code: str, message: str) -> None:
        """End the Calls phase with a failure the dispatcher cannot see (the stream
        itself broke); the core converges the task and the terminal path cancels
        the calls still in flight."""
        if rt.on_calls_done is not None and not rt.ended:
            rt.on_calls_done(rt, ConvergeTaskCalls(rt.task_id, False, code, message, False))

    async def _produce(self, rt) -> None:
        """Streaming build: pull batches from the builder's stream under scanSem and
        the credit window; BatchSettled returns a credit."""
        sc = self.stream_cfg
        tid = rt.task_id
        idx = 0
        try:
            async with self.admission.scan:
                stream = rt.stream
                if is_async_stream(stream):
                    batches = stream.abatches(sc.batch_max_rows, sc.batch_max_args_bytes)
                else:
                    batches = _as_async(stream.batches(sc.batch_max_rows, sc.batch_max_args_bytes))
                async for batch in batches:
                    await rt.credits.acquire()
                    if rt.ended:
                        return
                    try:
                        calls = self._resolve(rt, batch)
                    except Exception as exc:  # noqa: BLE001 - FunctionNotFound mid-stream
                        self._fail_calls(rt, fc.CALL_FAILED, str(exc))
                        return
                    prepared = self.disp.prepare_call_batch(tid, idx, calls)
                    if self.traces is not None: self.traces.calls_queued(tid, len(prepared), idx)  # trace hook
                    self.actor.post(lambda n, p=prepared: self.disp.commit_call_batch(p, n))
                    idx += 1
                    await asyncio.sleep(0)   # let executors' frames in between batches
            self.actor.post(lambda n: self.disp.production_done(tid, n))
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # noqa: BLE001 - the stream raised mid-way
            log.exception("task %s: stream production failed", tid)
            self._fail_calls(rt, fc.BUILDER_FAILED, f"stream production failed: {exc}")
        finally:
            aclose = getattr(rt.stream, "aclose", None)
            if aclose is not None:
                # cancelled or ended: the cursor, its transaction and its connection go now
                try:
                    await aclose()
                except Exception:  # noqa: BLE001
                    log.exception("task %s: closing the scan failed", tid)
            else:
                close = getattr(rt.stream, "close", None)
                if close is not None:
                    close()

    # ---- Plugin ------------------------------------------------------------------

    async def _writer_phase(self, rt, cmd: StartWriterPhase) -> PhaseOutcome:
        rh = cmd.result_handler
        if rh is None:
            return PhaseOutcome(ok=True)
        plugin = self.plugins.get(rh.type)
        if plugin is None:
            known = ", ".join(sorted(self.plugins.names())) or "none"
            msg = f"no writer plugin named {rh.type!r} (this worker's profile registers: {known})"
            return PhaseOutcome.failure(fc.PLUGIN_FAILED, msg,
                                        plugin_results=[PluginResult(rh.type, False, msg)])
        t0 = time.perf_counter()
        retryable = False
        async with self.admission.plugin:
            # phaseIoTimeoutMs bounds each IO operation of the plugin (a statement,
            # a batch, a file), which the plugin applies; the phase as a whole is
            # bounded by the task deadline (the core converges TIMED_OUT and the
            # terminal path cancels this runner, and so the plugin).
            ctx = PluginContext(task_id=rt.task_id, instance_id=rt.instance_id, deadline_ms=rt.deadline_ms,
                                io_timeout_ms=self.phase_io_timeout_ms)
            try:
                r = await plugin.execute(rh.config, cmd.outputs, ctx)
                pr = PluginResult(r.plugin, r.ok, r.message, r.details)
                retryable = bool(getattr(r, "retryable", False)) and not r.ok
            except Exception as exc:  # noqa: BLE001 - PluginError or a plugin bug
                pr = PluginResult(rh.type, False, f"{type(exc).__name__}: {exc}")
                retryable = bool(getattr(exc, "retryable", False))
        self.metrics.observe_phase("plugin", time.perf_counter() - t0)
        if pr.ok:
            return PhaseOutcome(ok=True, plugin_results=[pr])
        return PhaseOutcome.failure(fc.PLUGIN_FAILED, pr.message, retryable, plugin_results=[pr])


def is_async_stream(stream) -> bool:
    return callable(getattr(stream, "abatches", None))


async def _as_async(it):
    """A synchronous batch iterator, awaited like an async stream's."""
    for batch in it:
        yield batch


def _with_digests(table: dict, specs) -> Iterator[tuple]:
    for s in specs:
        fid = s.function_id
        digest, entry = table[fid]
        yield (fid, digest, s.args_json, entry)


def _calls_outcome(conv) -> PhaseOutcome:
    return PhaseOutcome(ok=conv.ok, failure_code=conv.failure_code, failure_message=conv.failure_message,
                        retryable=conv.retryable, outputs=conv.outputs, call_count=conv.call_count,
                        calls_failed=conv.calls_failed, call_retries=conv.call_retries,
                        cache_hits=conv.cache_hits)
