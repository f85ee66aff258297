"""activateAndRun: activation -> Builder -> Calls -> Plugin for each accepted
task, each phase under its admission gate, inline while no phase has to wait.

The runner only executes what WorkerCore decides: it reports each phase's outcome
with handle_task_phase_finished and runs whichever phase command comes back. When
the core converges the task for another reason (deadline, Watch grace), the
terminal path cancels this runner; a late outcome is dropped by the core as out
of order, so there is no race to lose."""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

from blockx._fast import load
from blockx.core import failure_codes as fc
from blockx.core.dispatch.commands import ConvergeTaskCalls
from blockx.core.types import (
    ConvergeTask, PhaseOutcome, PluginResult, StartBuilderPhase, StartCallPhase, StartPluginPhase,
    TaskPhase,
)
from blockx.plugins.builder_api import (MAX_EAGER_CALLS, BuildContext, BuilderError, is_async_streaming,
                                        is_streaming)
from blockx.adapters.call_failures import detail_for
from blockx.adapters.writer_stream import StreamedWrite
from blockx.plugins.plugin_api import PluginContext, can_stream, parse_config, stream_options

if TYPE_CHECKING:     # back-pointers: the Orchestrator hands in its core and actor
    from blockx.adapters.dispatch_actor import DispatchActor
    from blockx.core.worker.core import WorkerCore

PackedCalls = load("calllist").PackedCalls   # the callList builder's packed call list
log = logging.getLogger("blockx.phases")

_PHASE_OF = {StartBuilderPhase: TaskPhase.BUILDER, StartCallPhase: TaskPhase.CALLS,
             StartPluginPhase: TaskPhase.PLUGIN}
_CALLS_STARTED = object()    # _inline_phase: the Calls phase runs; its end calls back
_MUST_WAIT = object()        # _inline_phase: the phase has to wait; it is awaited in a Task


class TaskPhases:
    """The per-task phases.

    One phase loop (``_advance``) runs a task's phases in turn: inline while
    none of them has to wait (a synchronous builder whose gate has room, a Calls
    phase, started inline, whose end arrives as a callback from the dispatch
    actor, no plugin); a phase that must wait (a full gate, an async builder, a
    plugin to await) is awaited in an asyncio Task (``_await_phase``), which
    then goes on with the same loop. ``end`` takes down what the phases hold
    once the task is terminal."""

    def __init__(self, *, core: WorkerCore, disp, actor: DispatchActor, runtimes, fcode, builders, plugins, io_factory, admission,
                 stream_cfg, metrics, phase_io_timeout_ms: int, wall: Callable[[], int],
                 on_converge: Callable[[ConvergeTask], None], traces=None, spans=None, writer_stream=None) -> None:
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
        self.spans = spans                        # TaskSpans (otel_spans.py); None when span export is off
        # writerStream settings (the app config's WriterStreamSection, which the app
        # passes); None: no writer streams, each runs after the Calls phase
        self.writer_stream = writer_stream

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
        """The phase loop, the only one: run ``step()`` (it returns the next phase
        command), then each phase in turn. A phase that can run inline runs here;
        the Calls phase stops the loop once started (its end calls back and the
        loop goes on from there); the first phase that must wait is awaited in one
        asyncio Task (``_await_phase``), which then goes on with this loop."""
        tid = rt.task_id
        try:
            nxt = step()
            while nxt is not None and not rt.ended:
                outcome = self._inline_phase(rt, nxt)
                if outcome is _CALLS_STARTED:
                    return                           # _calls_done_inline continues
                if outcome is _MUST_WAIT:
                    rt.runner = self._loop.create_task(self._await_phase(rt, nxt))
                    return
                nxt = self._phase_finished(tid, nxt, outcome)
        except Exception:  # noqa: BLE001 - a bug here must still converge the task
            log.exception("task %s phase driver crashed", tid)
            self._converge_after_crash(rt)

    def _phase_finished(self, tid: str, cmd, outcome: PhaseOutcome):
        """Report a phase's outcome to the core; the next phase command, if any."""
        return self._apply_core(self.core.handle_task_phase_finished(
            tid, _PHASE_OF[type(cmd)], outcome, self._wall()))

    def _inline_phase(self, rt, cmd):
        """Run phase ``cmd`` now if nothing in it has to wait: its outcome, or
        _CALLS_STARTED (a Calls phase is running; its end calls back), or
        _MUST_WAIT (a full gate, an async builder, a plugin)."""
        t = type(cmd)
        if t is StartBuilderPhase:
            builder = self.builders.get(cmd.function_call.type)
            if builder is not None and is_async_streaming(builder):
                return _MUST_WAIT                    # it awaits a database
            if builder is not None and not self.admission.builder.try_enter():
                return _MUST_WAIT
            return self._builder_outcome(rt, cmd, builder, gated=builder is not None)
        if t is StartCallPhase:
            if not self.admission.executor.try_enter():
                return _MUST_WAIT
            rt.gate = self.admission.executor
            rt.on_calls_done = self._calls_done_inline
            failed = self._start_calls(rt, cmd)
            if failed is None:
                return _CALLS_STARTED
            self.leave_calls(rt)
            return failed
        if t is StartPluginPhase and cmd.result_handler is None:
            return PhaseOutcome(ok=True)
        if t is StartPluginPhase:
            return _MUST_WAIT
        raise TypeError(f"task {rt.task_id}: unexpected phase command {cmd!r}")

    async def _await_phase(self, rt, cmd) -> None:
        """Phase ``cmd`` of a task that has to wait for it, awaited; then the
        phase loop goes on (inline again, or in another Task at the next wait)."""
        tid = rt.task_id
        try:
            t = type(cmd)
            if t is StartBuilderPhase:
                builder = self.builders.get(cmd.function_call.type)
                if builder is None:
                    outcome = self._builder_outcome(rt, cmd, None, gated=False)
                elif is_async_streaming(builder):
                    async with self.admission.builder:
                        outcome = await self._async_builder_outcome(rt, cmd, builder)
                else:
                    async with self.admission.builder:
                        outcome = self._builder_outcome(rt, cmd, builder, gated=False)
            elif t is StartCallPhase:
                outcome = await self._calls_phase(rt, cmd)
            else:
                outcome = await self._plugin_phase(rt, cmd)
        except asyncio.CancelledError:
            return
        except Exception:  # noqa: BLE001 - a bug here must still converge the task
            log.exception("task %s runner crashed", tid)
            self._converge_after_crash(rt)
            return
        rt.runner = None                             # this phase's wait is over
        if not rt.ended:
            self._advance(rt, lambda: self._phase_finished(tid, cmd, outcome))

    def _calls_done_inline(self, rt, conv) -> None:
        """The dispatch actor's ConvergeTaskCalls for a Calls phase started inline.
        The task moves on once the actor's run ends (DispatchActor.after_run), so
        the actor's batch and its epilogue stay the actor's alone, without a loop
        iteration in between (a lone task's terminal update waited for one)."""
        self.leave_calls(rt)
        outcome = _calls_outcome(conv, rt)
        self.actor.after_run(self._advance, rt, lambda: self._apply_core(self.core.handle_task_phase_finished(
            rt.task_id, TaskPhase.CALLS, outcome, self._wall())))

    def leave_calls(self, rt) -> None:
        """The running Calls phase of ``rt`` ends: its gate is released."""
        if rt.gate is not None:
            rt.gate.release()
            rt.gate = None
        rt.on_calls_done = None
        self.metrics.observe_phase("calls", time.perf_counter() - rt.calls_started)

    def end(self, rt) -> None:
        """The task of ``rt`` is terminal (its runtime is already marked ended):
        take down what its phases hold. The streaming producer stops (or a stream
        opened and never produced from closes), a Calls phase's wait is cancelled
        and its gate released, the phase runner is cancelled (unless it is what
        ends the task), the IO scope closes and the pinned code view is released."""
        if rt.producer is not None and not rt.producer.done():
            rt.producer.cancel()
        elif rt.producer is None and rt.stream is not None:
            close = getattr(rt.stream, "close", None)   # opened, never produced from
            if close is not None:
                close()
        if rt.calls_done is not None and not rt.calls_done.done():
            rt.calls_done.cancel()
        if rt.gate is not None and rt.runner is None:
            self.leave_calls(rt)                 # an inline Calls phase ends with its task
        rt.on_calls_done = None
        runner = rt.runner
        if runner is not None and not runner.done() and runner is not asyncio.current_task():
            runner.cancel()
        if rt.io_scope is not None:
            try:
                rt.io_scope.close()              # synchronous: fails pending waiters, drops the cache
            except Exception:  # noqa: BLE001
                log.exception("closing the IO scope of %s failed", rt.task_id)
        if rt.view is not None:
            try:
                rt.view.release()
            except Exception:  # noqa: BLE001
                log.exception("releasing the code view of %s failed", rt.task_id)

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
                if self.spans is not None: self.spans.phase_started(cmd)  # span hook
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
            return PhaseOutcome.failure(fc.BUILDER_FAILED, fc.prefixed(cmd.function_call.type, _builder_error(exc)),
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
            return PhaseOutcome.failure(fc.BUILDER_FAILED, fc.prefixed(cmd.function_call.type, _builder_error(exc)),
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
            failed = self._open_sink(rt)
            if failed is not None:
                return failed
            hand_over = rt.sink is not None
            self.actor.post(lambda n: self.disp.intake.commit_call_stream(
                rt.task_id, cmd.call_failure_policy, retry, cmd.instance_id, now=n, hand_over=hand_over))
            rt.credits = asyncio.Semaphore(self.stream_cfg.max_outstanding_batches)
            rt.producer = self.actor.spawn(self._produce(rt))
            return None
        specs: Any = cmd.calls or []      # a list of call specs, or the builder's PackedCalls
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
            prepared = self.disp.intake.prepare_packed_call_phase(
                rt.task_id, fns, specs.fidx, specs.args, specs.offs, cmd.call_failure_policy, retry,
                cmd.instance_id)
        else:
            prepared = self.disp.intake.prepare_call_phase(rt.task_id, calls, cmd.call_failure_policy, retry,
                                                    cmd.instance_id)
        # The dispatcher holds the calls in its compact form now. The builder's list
        # is also referenced by the core's record of the task (its builder outcome
        # and this StartCallPhase) for the task's whole life: empty it, so a queued
        # call is not kept twice (the core never reads it again).
        if type(specs) is list or packed:
            specs.clear()
        if self.traces is not None: self.traces.calls_queued(rt.task_id, len(prepared))  # trace hook
        self.actor.post(lambda n: self.disp.intake.commit_call_phase(prepared, now=n))
        return None

    def _open_sink(self, rt) -> PhaseOutcome | None:
        """A streaming task whose writer can stream gets its StreamedWrite (rt.sink)
        before its first batch; a failure outcome for a writer config it refuses."""
        ws = self.writer_stream
        ctx = self.core.get_task_context(rt.task_id)
        rh = ctx.result_handler if ctx is not None else None
        if ws is None or not ws.enabled or rh is None:
            return None
        plugin = self.plugins.get(rh.type)
        if plugin is None or not can_stream(plugin):
            return None
        try:
            stream, keep = stream_options(rh.type, parse_config(rh.type, rh.config))
            if not stream:
                return None
            pctx = PluginContext(task_id=rt.task_id, instance_id=rt.instance_id, deadline_ms=rt.deadline_ms,
                                 io_timeout_ms=self.phase_io_timeout_ms)
            opened = plugin.open_stream(rh.config, pctx)
        except Exception as exc:  # noqa: BLE001 - PluginError or a plugin bug
            msg = str(exc) if str(exc).startswith(rh.type) else f"{rh.type}: {type(exc).__name__}: {exc}"
            return PhaseOutcome.failure(fc.PLUGIN_FAILED, msg, plugin_results=[PluginResult(rh.type, False, msg)])
        rt.sink = StreamedWrite(
            rh.type, opened, keep_outputs=ws.keep_outputs if keep is None else keep,
            keep_output_bytes=ws.keep_output_bytes, buffer_bytes=ws.buffer_bytes, write_bytes=ws.write_bytes,
            on_failure=lambda r, retryable: self._fail_calls(rt, fc.PLUGIN_FAILED, r.message, retryable))
        return None

    async def _calls_phase(self, rt, cmd: StartCallPhase) -> PhaseOutcome:
        await self.admission.executor.enter()
        rt.gate = self.admission.executor
        done = rt.calls_done = self._loop.create_future()

        def calls_done(rt_, conv) -> None:
            if not done.done():
                done.set_result(conv)
        rt.on_calls_done = calls_done
        try:
            failed = self._start_calls(rt, cmd)
            if failed is not None:
                return failed
            conv = await done
        finally:
            if rt.gate is not None:
                self.leave_calls(rt)
        return _calls_outcome(conv, rt)

    def calls_converged(self, cmd) -> None:
        """The dispatch actor's ConvergeTaskCalls: the task's Calls phase is over."""
        rt = self._runtimes.get(cmd.task_id)
        if rt is not None and rt.on_calls_done is not None:
            rt.on_calls_done(rt, cmd)

    @staticmethod
    def _fail_calls(rt, code: str, message: str, retryable: bool = False) -> None:
        """End the Calls phase with a failure the dispatcher cannot see (the stream
        itself broke, its writer refused a batch); the core converges the task and
        the terminal path cancels the calls still in flight."""
        if rt.on_calls_done is not None and not rt.ended:
            rt.on_calls_done(rt, ConvergeTaskCalls(rt.task_id, False, code, message, retryable))

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
                    prepared = self.disp.intake.prepare_call_batch(tid, idx, calls)
                    if self.traces is not None: self.traces.calls_queued(tid, len(prepared), idx)  # trace hook
                    self.actor.post(functools.partial(self.disp.intake.commit_call_batch, prepared))   # (prepared, now)
                    idx += 1
                    await asyncio.sleep(0)   # let executors' frames in between batches
            self.actor.post(lambda n: self.disp.intake.production_done(tid, now=n))
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # noqa: BLE001 - the stream raised mid-way
            log.exception("task %s: stream production failed", tid)
            self._fail_calls(rt, fc.BUILDER_FAILED, f"stream production failed: {exc}",
                             bool(getattr(exc, "retryable", False)))    # a lost connection may succeed on a retry
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

    async def _plugin_phase(self, rt, cmd: StartPluginPhase) -> PhaseOutcome:
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
        if rt.sink is not None:          # it consumed the batches as they settled: commit them
            async with self.admission.plugin:
                pr, retryable = await rt.sink.finish()
            self.metrics.observe_phase("plugin", time.perf_counter() - t0)
            if pr.ok:
                return PhaseOutcome(ok=True, plugin_results=[pr], outputs_written=rt.sink.written)
            return PhaseOutcome.failure(fc.PLUGIN_FAILED, pr.message, retryable, plugin_results=[pr])
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


def _builder_error(exc: Exception) -> str:
    """A BuilderError's message is written for the user; a builder's bug also says its type."""
    text = str(exc)
    if isinstance(exc, BuilderError):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


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




def _calls_outcome(conv, rt=None) -> PhaseOutcome:
    # A streamed task's outputs went to its writer; the result keeps the first ones.
    outputs = rt.sink.kept if rt is not None and rt.sink is not None and conv.ok else conv.outputs
    out = PhaseOutcome(ok=conv.ok, failure_code=conv.failure_code, failure_message=conv.failure_message,
                       retryable=conv.retryable, outputs=outputs, call_count=conv.call_count,
                       calls_failed=conv.calls_failed, call_retries=conv.call_retries,
                       cache_hits=conv.cache_hits)
    if not conv.ok:
        detail = detail_for(rt, conv.failure_message)     # the call the message names (call_failures)
        if detail is not None:
            out.failure_call_id = detail.call_id
            out.failure_traceback = detail.traceback
            out.failure_locals = tuple(detail.local_vars)
    return out
