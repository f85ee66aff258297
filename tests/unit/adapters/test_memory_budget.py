"""The memory budget (blockx.adapters.memory_budget): where a derived budget comes
from, and the refusal of new work past it, read from this process's real RSS."""
from blockx.adapters import memory_budget as mb


def test_the_limit_files_of_a_cgroup_and_the_cgroups_above_it():
    assert mb._limit_files("0::/a/b\n4:memory:/x\n3:cpu,cpuacct:/y\nbad line") == [
        "/sys/fs/cgroup/a/b/memory.max", "/sys/fs/cgroup/a/memory.max", "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/x/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]


def test_a_configured_budget_wins_and_zero_derives_80_percent_of_a_limit():
    assert mb.resolve_budget(123) == (123, "as configured")
    limit, source = mb.memory_limit()
    budget, how = mb.resolve_budget(0)
    assert limit > 0 and budget == limit * 80 // 100 and how == f"80% of {source}"


def test_over_the_budget_new_work_is_refused_naming_the_budget_and_its_setting():
    b = mb.MemoryBudget(1 << 50)                # far above this process
    try:
        assert b.rss > 0 and not b.over and b.refusal() is None and b.refusals == 0
        b.budget = b.rss // 2                   # far below it
        b.refresh()
        assert b.over
        message = b.refusal()
        assert message is not None and b.refusals == 1
        assert message.startswith("the worker is over its memory budget: ")
        assert "(memoryBudgetBytes, WORKER_MEMORY_BUDGET_BYTES: as configured)" in message
        b.budget = 0                            # off
        b.refresh()
        assert not b.over and b.refusal() is None
    finally:
        b.stop()
