"""The memory diagnostics sampler reads every figure from its owner at the
moment it logs: real cores, a real function code directory,
a real (idle) executor adapter."""
import asyncio
import logging

import pytest

from blockx.adapters.executor import ExecutorAdapter
from blockx.app.memory_diagnostics import MemoryDiagnostics, rss_bytes
from blockx.core.config import Config
from blockx.core.dispatch.dispatcher import DispatcherCore
from blockx.core.dispatch.config import DispatcherConfig
from blockx.core.dispatch.types import PinnedCall
from blockx.core.worker.core import WorkerCore
from blockx.plugins.function_code.directory import FunctionCodeDirectory


@pytest.fixture
def owners(tmp_path):
    (tmp_path / "fn").mkdir()
    (tmp_path / "fn" / "add.py").write_text("def main(a, b):\n    return a + b\n")
    core = WorkerCore(Config(task_slots=4))
    disp = DispatcherCore(DispatcherConfig(), lambda: 0.0)
    fcode = FunctionCodeDirectory(str(tmp_path / "fn"), 60_000, now_ms=0)
    adapter = ExecutorAdapter(str(tmp_path / "w.sock"))
    return core, disp, fcode, adapter


def test_sample_reads_the_owners_now(owners):
    core, disp, fcode, adapter = owners
    diag = MemoryDiagnostics(core=core, disp=disp, fcode=fcode, adapter=adapter, interval_ms=60_000)
    s = diag.sample()
    assert s["queued_calls"] == s["calls_held"] == s["active_tasks"] == s["retained_results"] == 0
    assert s["code_snapshots"] == 1
    assert s["executors_rss_bytes"] == {} and s["executors_rss_total_bytes"] == 0
    assert s["rss_bytes"] > 10 * 1024 * 1024 and len(s["gc_counts"]) == 3
    # The same sampler sees later changes: it holds references, not copies.
    prepared = disp.intake.prepare_call_phase("t", [PinnedCall("add", "d" * 64, b"[1,2]", "") for _ in range(3)])
    disp.intake.commit_call_phase(prepared, 0)
    s = diag.sample()
    # Queued calls are kept compact: they get a call context only when admitted.
    assert (s["queued_calls"], s["calls_held"]) == (3, 0)


def test_rss_is_this_process():
    with open("/proc/self/status") as f:
        vmrss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    assert abs(rss_bytes() - vmrss) < 16 * 1024 * 1024


def test_interval_zero_disables_and_a_bad_interval_is_refused(owners):
    core, disp, fcode, adapter = owners
    with pytest.raises(ValueError, match="memoryDiagnosticsIntervalMs"):
        MemoryDiagnostics(core=core, disp=disp, fcode=fcode, adapter=adapter, interval_ms=-1)
    off = MemoryDiagnostics(core=core, disp=disp, fcode=fcode, adapter=adapter, interval_ms=0)
    asyncio.run(asyncio.wait_for(off.run(), 1.0))        # returns at once
    assert off.lines == 0


def test_run_logs_one_structured_line_per_interval(owners, caplog):
    core, disp, fcode, adapter = owners
    diag = MemoryDiagnostics(core=core, disp=disp, fcode=fcode, adapter=adapter, interval_ms=20)

    async def go():
        task = asyncio.ensure_future(diag.run())
        while diag.lines < 3:
            await asyncio.sleep(0.005)
        task.cancel()

    with caplog.at_level(logging.INFO, logger="blockx.memory"):
        asyncio.run(asyncio.wait_for(go(), 5.0))
    recs = [r for r in caplog.records if getattr(r, "event", "") == "memory_diagnostics"]
    assert len(recs) >= 3
    assert set(recs[0].fields) >= {"rss_bytes", "queued_calls", "retained_results", "code_snapshots",
                                   "executors_rss_bytes", "executors_rss_total_bytes"}


def test_the_interval_is_a_config_setting_with_its_default_and_check(tmp_path):
    from blockx.app.config import ConfigError, load_config
    from blockx.app.profile import BLOCK
    cfg = load_config(BLOCK, env={})
    assert cfg.memory_diagnostics_interval_ms == 60_000
    assert cfg.to_dict()["memoryDiagnosticsIntervalMs"] == 60_000
    f = tmp_path / "w.json"
    f.write_text('{"memoryDiagnosticsIntervalMs": 250}')
    assert load_config(BLOCK, env={"WORKER_CONFIG": str(f)}).memory_diagnostics_interval_ms == 250
    f.write_text('{"memoryDiagnosticsIntervalMs": -5}')
    bad = load_config(BLOCK, env={"WORKER_CONFIG": str(f)})
    with pytest.raises(ConfigError, match="memoryDiagnosticsIntervalMs"):
        bad.validate(BLOCK)
